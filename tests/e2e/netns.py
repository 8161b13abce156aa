"""Run a test scenario in a private network namespace, where any address can be bound.

Loopback-only tests cannot show that Envoy refuses, say, ``64:ff9b::a14:1e28``
(NAT64 for 10.20.30.40): nothing could listen there. In a fresh network
namespace (``unshare --net``, with a user namespace when not root) the
scenario adds the addresses it needs to ``lo`` and binds them; traffic never
leaves the namespace, which has no other interface. The scenario is a
module-level coroutine function of a file under tests/e2e, called with
JSON-able keyword arguments; its JSON-able result comes back.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


async def run_in_netns(module: str, function: str, timeout: float = 120, **kwargs: Any) -> Any:
    """``module.function(**kwargs)`` in a new network namespace; its result."""
    args = [
        "unshare",
        "--net",
        "--map-root-user",
        sys.executable,
        __file__,
        module,
        function,
        json.dumps(kwargs),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*sys.path]))
    proc = await asyncio.create_subprocess_exec(
        *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=HERE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        raise AssertionError(
            f"scenario {module}.{function} failed ({proc.returncode}):\n{err.decode()[-6000:]}"
        )
    return json.loads(out.decode().splitlines()[-1])


def add_addresses(addresses: Iterable[str]) -> None:
    """Bring ``lo`` up and give it ``addresses`` (inside the namespace only)."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in addresses:
        prefix = 128 if ":" in address else 32
        subprocess.run(["ip", "addr", "add", f"{address}/{prefix}", "dev", "lo", "nodad"], check=True)


def _main() -> None:
    module, function, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    sys.path.insert(0, str(HERE))
    scenario = getattr(importlib.import_module(module), function)
    result = asyncio.run(scenario(**kwargs))
    print(json.dumps(result))


if __name__ == "__main__":
    _main()
