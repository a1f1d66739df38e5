"""Regression triage: confirm, localize, explain a change in the weekly ladder."""
