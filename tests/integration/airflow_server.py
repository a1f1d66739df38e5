"""A real ``airflow api-server`` alone for the UI tests: the project's ``LocalStack`` harness
(traceladder.embedded.local_stack) with only the api-server, no scheduler and no S3 server of its
own; its own temporary AIRFLOW_HOME, a migrated SQLite database, the repo's DAGs serialized,
this repo's plugins, SimpleAuthManager users ``admin`` (Admin) and ``viewer`` (Viewer), on a
free loopback port.

    server = AirflowApiServer(home, extra_env={"AIRFLOW_CONN_TRACELADDER_S3": ...})
    server.start()            # db migrate, pools, dags reserialize, api-server, poll health
    server.token("admin")     # a JWT from POST /auth/token
    server.stop()             # SIGTERM, then SIGKILL of its process group

S3 is reachable only through the connection the test gives in ``extra_env``.
"""

from __future__ import annotations

from pathlib import Path

from traceladder.embedded.local_stack import USERS, LocalStack, StackError, free_port  # noqa: F401 (re-exported)

AirflowServerError = StackError


class AirflowApiServer(LocalStack):
    def __init__(
        self,
        home: Path,
        extra_env: dict[str, str] | None = None,
        startup_timeout_s: float = 120,
        prepare: bool = True,
        passwords: dict[str, str] | None = None,
    ) -> None:
        """``prepare=False`` reuses a home another server prepared (its database and passwords:
        pass that server's ``passwords``)."""
        super().__init__(
            Path(home),
            home=Path(home),
            with_s3=False,
            components=("api-server",),
            extra_env=extra_env,
            passwords=passwords,
            prepare=prepare,
            startup_timeout_s=startup_timeout_s,
        )

    def start(self) -> "AirflowApiServer":
        super().start()
        return self
