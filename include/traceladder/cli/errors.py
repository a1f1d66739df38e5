"""The exceptions that mean "bad input or an unreachable service", shown as one line.

Each module owns its error type; this collects them for the CLI and the Airflow tasks, importing
lazily so that asking for the list costs no heavy import."""

from __future__ import annotations

from traceladder.config.validate import LadderConfigError


def _collect() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [LadderConfigError]
    try:
        from traceladder.storage.artifacts import ArtifactIntegrityError, ArtifactKeyError, ArtifactStoreError

        errors += [ArtifactStoreError, ArtifactKeyError, ArtifactIntegrityError]
    except ImportError:  # storage not installed in a minimal runner image
        pass
    try:
        from traceladder.runner.primus_log import PrimusLogError
        from traceladder.rung_spec import SpecError

        errors += [PrimusLogError, SpecError]
    except ImportError:
        pass
    try:  # not in the runner image
        from traceladder.dev.local_airflow import AirflowSetupError
        from traceladder.dev.embedded_s3 import EmbeddedS3Error

        errors += [EmbeddedS3Error, AirflowSetupError]
    except ImportError:
        pass
    return tuple(errors)


USER_ERRORS: tuple[type[BaseException], ...] = _collect()
