#!/bin/sh
# As the official redis image: options alone mean redis-server; redis-server without a config
# file listens on every interface with protected mode off (the compose network is the boundary).
set -eu
case "${1:-}" in -*) set -- redis-server "$@" ;; esac
if [ "${1:-}" = redis-server ]; then
  shift
  case "${1:-}" in *.conf) exec redis-server "$@" ;; esac
  exec redis-server --protected-mode no "$@"
fi
exec "$@"
