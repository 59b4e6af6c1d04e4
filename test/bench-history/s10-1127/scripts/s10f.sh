#!/usr/bin/env bash
node .dev-main/copylist-probe.mjs | tail -3
bash .dev-main/s10e.sh
