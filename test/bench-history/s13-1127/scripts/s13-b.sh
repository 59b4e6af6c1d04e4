#!/bin/bash
cd "$(dirname "$0")"
for r in 1 2; do for s in 0 1 2 4; do ./evflags $s; done; done
