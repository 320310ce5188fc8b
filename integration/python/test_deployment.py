"""The deployment files are valid: the Kubernetes manifests against the
API schemas (kubernetes-validate, strict), their commands, flags, probes
and settings against the real binaries, and the Dockerfile's stages
against the repository."""

import re
import subprocess

import yaml
from dockerfile_parse import DockerfileParser
from kubernetes_validate import validate as k8s_validate

from conftest import BIN_DIR, REPO

DEPLOY = REPO / "docs" / "deploy"
K8S_VERSION = "1.37.0"


def documents():
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def containers():
    for name, doc in documents():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                yield doc, container


def flags_of(binary, *subcommand):
    out = subprocess.run(
        [str(BIN_DIR / binary), *subcommand, "--help"], capture_output=True, text=True, check=True
    ).stdout
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)", out, re.M))


def test_manifests_match_the_kubernetes_schemas():
    kinds = set()
    for name, doc in documents():
        k8s_validate(doc, K8S_VERSION, strict=True)
        kinds.add(doc["kind"])
    assert {"ConfigMap", "Deployment", "StatefulSet", "Service"} <= kinds


def test_commands_flags_and_probes_exist_in_the_binaries():
    seen = set()
    for doc, container in containers():
        binary = container["command"][0]
        seen.add(binary)
        assert set(a for a in container["args"] if a.startswith("--")) <= flags_of(binary)
        ports = {p["name"] for p in container["ports"]}
        probe = container["readinessProbe"]["exec"]["command"]
        assert probe[:2] == ["squadron-server", "health-check"]
        assert set(a for a in probe if a.startswith("--")) <= flags_of("squadron-server", "health-check")
        assert container["livenessProbe"]["tcpSocket"]["port"] in ports
        mounts = {m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"] for v in doc["spec"]["template"]["spec"]["volumes"]}
        assert mounts <= volumes
    assert seen == {"squadron-server", "squadron-worker"}


def test_services_select_pods_and_name_their_ports():
    pods = [
        (doc["spec"]["template"]["metadata"]["labels"], c)
        for doc, c in containers()
    ]
    for name, doc in documents():
        if doc["kind"] != "Service":
            continue
        selector = doc["spec"]["selector"]
        matching = [c for labels, c in pods if selector.items() <= labels.items()]
        assert matching, f"service {doc['metadata']['name']} selects no pod"
        named = {p["name"] for c in matching for p in c["ports"]}
        for port in doc["spec"]["ports"]:
            assert port["targetPort"] in named


def test_the_config_files_are_accepted_by_the_binaries(tmp_path):
    config = next(doc for _, doc in documents() if doc["kind"] == "ConfigMap")
    for key, binary in (("coordinator.toml", "squadron-server"), ("worker.toml", "squadron-worker")):
        file = tmp_path / key
        file.write_text(config["data"][key])
        # Unknown keys and bad values fail before --help is printed.
        done = subprocess.run(
            [str(BIN_DIR / binary), "--config", str(file), "--help"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    # And a bad key is refused, naming it.
    bad = tmp_path / "bad.toml"
    bad.write_text('listen = "0.0.0.0:1"\nworkers-dnss = "x:1"\n')
    done = subprocess.run(
        [str(BIN_DIR / "squadron-server"), "--config", str(bad), "--help"], capture_output=True, text=True
    )
    assert done.returncode != 0 and "workers-dnss" in done.stderr


def test_coordinator_and_workers_share_a_warehouse_no_volume_holds():
    import tomllib

    config = next(doc for _, doc in documents() if doc["kind"] == "ConfigMap")
    coordinator = tomllib.loads(config["data"]["coordinator.toml"])
    worker = tomllib.loads(config["data"]["worker.toml"])
    # Created tables are written by the workers and committed by the
    # coordinator: both name the same warehouse, in an object store (a
    # pod's volume is its own), with the same store options.
    assert coordinator["warehouse"] == worker["warehouse"]
    assert re.match(r"^(s3|gs|az|abfss)://", coordinator["warehouse"])
    assert coordinator.get("store", []) == worker.get("store", [])
    assert {"--warehouse", "--store"} <= flags_of("squadron-server")
    assert {"--warehouse", "--store"} <= flags_of("squadron-worker")
    # Their credentials come from the same optional Secret.
    secrets = [
        [e["secretRef"]["name"] for e in container.get("envFrom", [])]
        for _, container in containers()
    ]
    assert all(s == ["squadron-object-store"] for s in secrets), secrets


def test_the_dockerfile_builds_both_binaries_from_the_repository():
    parser = DockerfileParser(path=str(DEPLOY / "Dockerfile"))
    instructions = parser.structure
    froms = [i for i in instructions if i["instruction"] == "FROM"]
    assert len(froms) == 2, "a build stage and a slim runtime stage"
    sources = []
    for copy in (i for i in instructions if i["instruction"] == "COPY" and "--from" not in i["value"]):
        for source in copy["value"].split()[:-1]:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            sources.append(source.rstrip("/"))
    # cargo loads the whole workspace: a member left out fails the build.
    import tomllib

    members = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["members"]
    for member in members:
        assert any(member == s or member.startswith(s + "/") for s in sources), (
            f"workspace member {member} is not copied into the build stage"
        )
    build = " ".join(i["value"] for i in instructions if i["instruction"] == "RUN")
    assert "--bin squadron-server" in build and "--bin squadron-worker" in build
    assert "--locked" in build
    runtime = instructions[instructions.index(froms[1]):]
    copied = " ".join(i["value"] for i in runtime if i["instruction"] == "COPY")
    assert "release/squadron-server" in copied and "release/squadron-worker" in copied
    assert any(i["instruction"] == "USER" and i["value"] != "root" for i in runtime)
