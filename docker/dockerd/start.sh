#!/usr/bin/env bash
# Start ONE Docker Engine for the tests and CI: a unix socket and a TLS TCP listener, with
# certificates generated here (openssl). Idempotent: when the daemon already answers on both, it
# only prints the environment. Prints `export NAME=VALUE` lines for the tests (eval them).
#
#   eval "$(docker/dockerd/start.sh)"
#
# Settings (environment):
#   TRACELADDER_DOCKERD_DIR   state folder: tls/, dockerd.log, dockerd.pid (default /var/lib/traceladder/dockerd)
#   TRACELADDER_DOCKERD_SOCK  unix socket (default /var/run/docker.sock)
#   TRACELADDER_DOCKERD_TLS_PORT  TLS port on 127.0.0.1 (default 2376)
# Needs: dockerd (Debian's docker.io), openssl, root. FACTS.md: --iptables=false --bridge=none, so
# containers use host networking and builds need --network host.
set -euo pipefail
# Machine-wide, not per clone: every clone (and CI) must present the certificates the running
# daemon was started with.
state="${TRACELADDER_DOCKERD_DIR:-/var/lib/traceladder/dockerd}"
sock="${TRACELADDER_DOCKERD_SOCK:-/var/run/docker.sock}"
port="${TRACELADDER_DOCKERD_TLS_PORT:-2376}"
tls="$state/tls"
mkdir -p "$state" "$tls"
chmod 700 "$tls"

log() { echo "start-dockerd: $*" >&2; }

make_certs() {
  [[ -s "$tls/ca.pem" && -s "$tls/server-cert.pem" && -s "$tls/cert.pem" && -s "$tls/key.pem" ]] && return 0
  log "generating a CA, a server and a client certificate in $tls"
  local tmp; tmp="$(mktemp -d)"
  (
    cd "$tmp"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=traceladder-test-ca" \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server-key.pem -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile server.ext -out server-cert.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=traceladder-client" -keyout key.pem -out client.csr 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' > client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile client.ext -out cert.pem 2>/dev/null
    install -m 0644 ca.pem server-cert.pem cert.pem "$tls/"
    install -m 0600 server-key.pem key.pem "$tls/"
  )
  rm -rf "$tmp"
}

answers() {  # $1 = host url, rest = extra docker flags
  local host="$1"; shift
  timeout 5 docker -H "$host" "$@" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

tls_flags=(--tlsverify --tlscacert "$tls/ca.pem" --tlscert "$tls/cert.pem" --tlskey "$tls/key.pem")

make_certs
if answers "unix://$sock" && answers "tcp://127.0.0.1:$port" "${tls_flags[@]}"; then
  log "dockerd already answers on unix://$sock and tcp://127.0.0.1:$port (TLS)"
elif answers "unix://$sock"; then
  log "a dockerd not started by this script answers on unix://$sock without the TLS listener; the TLS tests need tcp://127.0.0.1:$port"
else
  command -v dockerd >/dev/null || { log "no dockerd: apt-get install -y docker.io"; exit 1; }
  log "starting dockerd (unix://$sock, tcp://127.0.0.1:$port with TLS); log in $state/dockerd.log"
  rm -f "$sock"
  setsid nohup dockerd \
    --iptables=false --bridge=none \
    --host "unix://$sock" --host "tcp://127.0.0.1:$port" \
    --tlsverify --tlscacert "$tls/ca.pem" --tlscert "$tls/server-cert.pem" --tlskey "$tls/server-key.pem" \
    --pidfile "$state/dockerd.pid" \
    >>"$state/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 120); do
    answers "unix://$sock" && break
    sleep 0.5
  done
  answers "unix://$sock" || { log "dockerd did not answer within 60 s:"; tail -5 "$state/dockerd.log" >&2; exit 1; }
  answers "tcp://127.0.0.1:$port" "${tls_flags[@]}" || { log "dockerd answers on the socket but not on TLS port $port"; exit 1; }
  log "dockerd is up (pid $(cat "$state/dockerd.pid"))"
fi
echo "export DOCKER_HOST=unix://$sock"
echo "export TRACELADDER_DOCKER_TLS_URL=tcp://127.0.0.1:$port"
echo "export TRACELADDER_DOCKER_TLS_DIR=$tls"
