#!/usr/bin/env bash
# Snakemake runs this inside the freshly created conda environment of envs/lnrepro.yaml
# (https://snakemake.readthedocs.io/en/stable/snakefiles/deployment.html#providing-post-deployment-scripts):
# install the project itself, editable, so the rules' `lnrepro` command runs the repository's code.
# Its dependencies come from envs/lnrepro.yaml (--no-deps: nothing is resolved twice).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python -m pip install --quiet --no-deps -e "$repo"
