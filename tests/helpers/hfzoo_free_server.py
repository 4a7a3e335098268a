"""The process behind `tests.helpers.remote_code.HfzooFreePython`: it runs scripts one after another, each as
`python script.py args...` would run it, in a Python where `import hfzoo` fails.

Requests come on standard input, one JSON line each ({"script", "args", "cwd"}); the script's standard output and
error (Python's and the C libraries', through file descriptors 1 and 2) go to files in its folder, its standard input
is empty, and one JSON line ({"returncode"}) answers on the pipe that standard output was at start.
"""

import gc
import json
import os
import runpy
import sys
import traceback

replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # whatever is printed between scripts goes to the log, not into the replies
requests = sys.stdin
try:
    import hfzoo  # noqa: F401
except ImportError:
    pass
else:
    sys.exit("hfzoo is importable here; the scripts this process runs would prove nothing")
import torch
import transformers  # noqa: F401 (imported once, for every script)

torch.set_num_threads(1)


def run(script: str, args: list[str], cwd: str) -> int:
    os.chdir(cwd)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


for line in requests:
    request = json.loads(line)
    saved = os.dup(1), os.dup(2)
    with open(os.path.join(request["cwd"], "stdout.txt"), "wb") as out, \
            open(os.path.join(request["cwd"], "stderr.txt"), "wb") as err:  # fmt: skip
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdin = open(os.devnull)
        try:
            returncode = run(request["script"], request["args"], request["cwd"])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdin.close()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for descriptor in saved:
                os.close(descriptor)
    gc.collect()
    replies.write(json.dumps({"returncode": returncode}) + "\n")
    replies.flush()
