#!/bin/sh
# The "build" of this example: nginx's configuration with the arm's own lines
# (ARM_CONFIG=NAME: NAME.conf, one of baseline, candidate, candidate-quarter) and the site it
# serves, put together in out/.
set -eu
: "${ARM_CONFIG:?set ARM_CONFIG (baseline, candidate or candidate-quarter) in the arm's env}"
[ -f "$ARM_CONFIG.conf" ] || { echo "no $ARM_CONFIG.conf" >&2; exit 1; }
rm -rf out
mkdir -p out
cp -r site out/site
awk 'FNR == NR { lines = lines $0 "\n"; next }
     /-- the arm.s own lines --/ { printf "%s", lines; next }
     { print }' "$ARM_CONFIG.conf" nginx.conf.in > out/nginx.conf.in
cp start.sh out/start.sh
echo "built nginx config: ${ARM_CONFIG}"
