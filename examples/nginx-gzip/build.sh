#!/bin/sh
# The "build" of this example: an nginx configuration with the arm's gzip level, and the
# site it serves, put together in out/ (the artifact).
set -eu
: "${GZIP_LEVEL:?set GZIP_LEVEL (1-9) in the arm's env}"
rm -rf out
mkdir -p out
cp -r site out/site
sed "s/@GZIP_LEVEL@/${GZIP_LEVEL}/" nginx.conf.in > out/nginx.conf.in
cp start.sh out/start.sh
echo "built nginx config with gzip_comp_level ${GZIP_LEVEL}"
