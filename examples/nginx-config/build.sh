#!/bin/sh
# The "build" of this example: nginx's configuration, with the user-agent classification
# when the arm's AGENT_CLASSES=1, and the site it serves, put together in out/.
set -eu
: "${AGENT_CLASSES:?set AGENT_CLASSES (0 or 1) in the arm's env}"
rm -rf out
mkdir -p out
cp -r site out/site
if [ "$AGENT_CLASSES" = 1 ]; then
    awk 'FNR == NR { block = block $0 "\n"; next }
         /@AGENT_MAP@/ { printf "%s", block; next }
         /@AGENT_HEADER@/ { print "            add_header X-Agent-Class $agent_class;"; next }
         { print }' agent-map.conf nginx.conf.in > out/nginx.conf.in
else
    grep -v '@AGENT_MAP@\|@AGENT_HEADER@' nginx.conf.in > out/nginx.conf.in
fi
cp start.sh out/start.sh
echo "built nginx config, agent classes: ${AGENT_CLASSES}"
