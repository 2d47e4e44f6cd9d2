#!/bin/bash
# Forty-sixth H200 call (session 17, issue 4; one GPU): `phantora profile` names the kernels each op launched;
# for the MoE's forward expert GEMM at a few row counts, are they the kernels call 45's sweep recorded?
cd "$(dirname "$0")/../.."
source benchmarks/h200/device_call.sh
call_setup 46
PYTHONPATH=src timeout 300 python3 benchmarks/h200/check_profile_kernels.py $C 2>&1 | grep -v "^\s*$" | tail -20
echo "elapsed $(( $(date +%s) - T0 )) s"
