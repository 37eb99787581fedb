#!/usr/bin/env bash
# Call 3, on call 2's warm machine (its build-device): the eager TP=8 cells at plan.solo_lanes 1
# and 2 (the file's 4 ran in call 2's matrix).
export NCCL_NVLS_ENABLE=0; for lanes in 1 2; do t=$(date +%s); build-device/bih run scenarios/issue-56370-gpu.json --only 'tp=8,*graph=none*' --set plan.solo_lanes=$lanes --out /tmp/l$lanes >/tmp/l.txt 2>&1; echo "tp=8 eager cells, solo_lanes=$lanes: exit $? in $(( $(date +%s) - t )) s"; python3 ci/matrix-timings.py /tmp/l$lanes | cut -c1-110; done 2>&1 | tee $OUT/call3-tp8-lanes.txt
