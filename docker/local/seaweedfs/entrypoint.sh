#!/bin/sh
# As chrislusf/seaweedfs's entrypoint for `server`: logs to stderr, volumes as many as the disk
# allows (weed's default of 8 runs out), 1 GB volumes; any other command runs as given.
set -eu
if [ "${1:-}" = server ]; then
  shift
  exec weed -logtostderr=true server -volume.max=0 -master.volumeSizeLimitMB=1024 "$@"
fi
exec weed "$@"
