# Sourced (not run) by the scripts for a lent device machine, which has Python and pip but not this project:
# installs the wheels carried in .whl/ (built for that machine's Python, installed with --no-deps) into
# /tmp/site and puts them and this checkout on PYTHONPATH. The plugins are then found through the entry points
# of seal_platform.egg-info, which must be carried too. Used by gpu_checks.sh and cpu_scaling_verify.sh.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || return 1
# Bytecode, as a regular install has it: the image sets PYTHONDONTWRITEBYTECODE, so without this every process
# compiles pydantic, bfcl_eval, ... from source again (about 0.2 s a start here; it made the verify timings of
# 2026-11-26 carry a start-up no user's install has).
python3 -m compileall -q /tmp/site > /dev/null || return 1
ln -sfn plugins seal_platform_plugins
ln -sfn recipes seal_platform_recipes
export PYTHONPATH=/tmp/site:$PWD
