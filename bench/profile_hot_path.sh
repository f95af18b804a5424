#!/bin/sh
# bench/profile_hot_path.sh SCENARIOS [SECONDS]: py-spy (raw, --native) of the in-process app looping
# those scenarios (bench/cpu_per_request.py); needs DATABASE_URL and py-spy in .venv. Output: /tmp/profile-SCENARIOS.txt
set -e
only=$1; seconds=${2:-20}
log=$(mktemp)
.venv/bin/python -m bench.cpu_per_request --database-url "$DATABASE_URL" --agents "${AGENTS:-1000}" --requests 200 \
  --keep "${KEEP:-capreg_cpu_profile}" --only "$only" --targets "${TARGETS:-200}" --profile-seconds $((seconds + 15)) >"$log" 2>&1 &
while ! grep -aq "looping" "$log"; do sleep 1; done
pid=$(grep -a -o "pid [0-9]*" "$log" | cut -d' ' -f2)
.venv/bin/py-spy record -p "$pid" -d "$seconds" -f raw ${NATIVE:+--native} -o "/tmp/profile-$only.txt" --nonblocking
wait
