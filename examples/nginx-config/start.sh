#!/bin/sh
# Start nginx for one arm: start.sh PORT WORKDIR [HOST] (run from the artifact folder;
# HOST, where it listens, defaults to 127.0.0.1).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
port=$1
workdir=$2
host=${3:-127.0.0.1}
mkdir -p "$workdir"
sed -e "s|@PORT@|$port|" -e "s|@HOST@|$host|" -e "s|@WORKDIR@|$workdir|g" -e "s|@SITE@|$here/site|" \
    "$here/nginx.conf.in" > "$workdir/nginx.conf"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
exec "$nginx" -p "$workdir" -c "$workdir/nginx.conf"
