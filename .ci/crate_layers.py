#!/usr/bin/env python3
"""Fails when a Squadron crate depends on a crate of its own or a higher layer.

Reads `cargo metadata` (the workspace's own manifests, every dependency
kind: a dev-dependency on a higher layer would show in `cargo tree` as
well). Each product crate lists the crates it may use; the test harnesses
at the top may use any. A workspace crate missing from LAYERS is an error
too: a new crate must be given its place.

Usage: crate_layers.py            (checks this workspace)
       crate_layers.py --self-test
"""
import json
import subprocess
import sys

# Lowest first. The worker and the coordinator side are siblings: neither
# links the other (the coordinator starts embedded workers as processes).
LAYERS = {
    "squadron-proto": set(),
    "squadron-common": set(),
    "squadron-net": {"squadron-proto", "squadron-common"},
    "squadron-storage": {"squadron-common"},
    "squadron-exec": {"squadron-proto", "squadron-common", "squadron-net", "squadron-storage"},
    "squadron-task-rewrites": {"squadron-exec"},
    "squadron-planner": {
        "squadron-proto",
        "squadron-common",
        "squadron-net",
        "squadron-storage",
        "squadron-exec",
    },
    "squadron-worker": {
        "squadron-proto",
        "squadron-common",
        "squadron-net",
        "squadron-storage",
        "squadron-exec",
        "squadron-task-rewrites",
    },
    "squadron-coordinator": {
        "squadron-proto",
        "squadron-common",
        "squadron-net",
        "squadron-storage",
        "squadron-exec",
        "squadron-planner",
    },
    "squadron-server": {
        "squadron-proto",
        "squadron-common",
        "squadron-net",
        "squadron-storage",
        "squadron-exec",
        "squadron-planner",
        "squadron-coordinator",
    },
}
# Test and benchmark harnesses: whole clusters, so they may link everything.
HARNESSES = {
    "squadron-cluster-tests",
    "squadron-sqllogictest",
    "squadron-fuzz",
    "squadron-bench",
}


def violations(packages):
    """packages: [{name, dependencies: [{name, kind}]}] as cargo metadata has them."""
    ours = {p["name"] for p in packages}
    found = []
    for package in packages:
        name = package["name"]
        if name in HARNESSES:
            continue
        if name not in LAYERS:
            found.append(f"{name}: not in .ci/crate_layers.py's LAYERS; give it its place")
            continue
        for dep in package["dependencies"]:
            if dep["name"] in ours and dep["name"] not in LAYERS[name]:
                kind = dep["kind"] or "normal"
                found.append(f"{name} depends on {dep['name']} ({kind}): not a lower layer")
    return found


def self_test():
    good = [
        {"name": "squadron-net", "dependencies": [{"name": "squadron-common", "kind": None}]},
        {"name": "squadron-common", "dependencies": [{"name": "anyhow", "kind": None}]},
    ]
    assert violations(good) == [], violations(good)
    upward = good + [
        {"name": "squadron-server", "dependencies": [{"name": "squadron-worker", "kind": "dev"}]},
        {"name": "squadron-worker", "dependencies": []},
    ]
    assert len(violations(upward)) == 1, violations(upward)
    unknown = good + [{"name": "squadron-extra", "dependencies": []}]
    assert len(violations(unknown)) == 1, violations(unknown)
    harness = good + [
        {"name": "squadron-cluster-tests", "dependencies": [{"name": "squadron-net", "kind": None}]}
    ]
    assert violations(harness) == [], violations(harness)


def main():
    self_test()
    if sys.argv[1:] == ["--self-test"]:
        print("crate_layers: self-test passed")
        return 0
    metadata = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    found = violations(metadata["packages"])
    for line in found:
        print(f"crate layers: {line}", file=sys.stderr)
    if found:
        return 1
    names = ", ".join(sorted(p["name"] for p in metadata["packages"]))
    print(f"crate layers: {names} depend only on lower layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
