"""The scale-out rules of the Kubernetes manifests, beside check_deploy.py (which runs them on
every kustomization and owns the helpers used here).

What they hold, for docs/deploy.md "Storage and scaling": every Deployment that runs more than
one replica has a PodDisruptionBudget; no ConfigMap carries a password, secret key or token (the
store's credentials come from Secrets); the runtime's termination grace period outlasts its
`[cluster] drain_ms`; runtime replicas over a shared store run with run leases and advertise
their pod IP on the gRPC port, and then their Service has no session affinity; every Secret key a
container reads is in the store Secret's template, which holds placeholders only and is in no
kustomization. Each rule is a function of rendered manifests returning its problems, so
test_check_deploy.py can break a copy and prove it notices.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlparse

import check_deploy as cd

# The store Secret's template, relative to deploy/.
SECRET_TEMPLATE = "k8s/overlays/cluster/secret-store.example.yaml"
# The runtime's `[cluster] drain_ms` when the file does not set it (services/runtime config).
DEFAULT_DRAIN_MS = 20_000
ADVERTISE_VAR = "TOOLPLANE_RUNTIME_ADVERTISE"

# A ConfigMap key naming a credential; a value that is an absolute path names the file holding
# it (TOOLPLANE_AUTH_SERVICE_TOKEN_FILE, TOOLPLANE_AUTH_TOKENS) and is fine.
SECRET_NAME = re.compile(r"password|passwd|secret|access_key|api_key|private_key|token", re.I)
# Credentials written inside a value: libpq's `password=…`, a URL's `user:password@`, libpq's and
# S3's variables assigned, an AWS access key id, a toolplane token.
SECRET_VALUE = (
    (re.compile(r"\bpassword\s*=\s*['\"]?[^\s'\"]", re.I), "a password"),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.I), "a URL with a password"),
    (re.compile(r"\b(PGPASSWORD|AWS_SECRET_ACCESS_KEY|AWS_ACCESS_KEY_ID)\s*[=:]\s*\S"), "a credential variable"),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), "an AWS access key id"),
    (re.compile(r"\btp_[A-Za-z0-9]{16,}"), "a toolplane token"),
)


def check_scale_out(docs: list[dict]) -> list[str]:
    return (
        check_disruption_budgets(docs)
        + check_config_map_secrets(docs)
        + check_runtime_cluster(docs)
        + check_secret_keys(docs)
    )


def min_replicas(docs: list[dict]) -> dict[str, int]:
    """The fewest replicas each Deployment runs: its HPA's minReplicas, else its replicas."""
    counts = {n: d["spec"].get("replicas", 1) for n, d in cd.by_kind(docs, "Deployment").items()}
    for hpa in cd.by_kind(docs, "HorizontalPodAutoscaler").values():
        counts[hpa["spec"]["scaleTargetRef"]["name"]] = hpa["spec"].get("minReplicas", 1)
    return counts


def check_disruption_budgets(docs: list[dict]) -> list[str]:
    """A Deployment of several replicas is selected by a PodDisruptionBudget, so a node drain or
    an eviction never takes all of them at once."""
    labels = cd.pod_labels(docs)
    budgets = cd.by_kind(docs, "PodDisruptionBudget").values()
    problems = []
    for name, count in sorted(min_replicas(docs).items()):
        if count > 1 and not any(cd.selector_matches(b["spec"].get("selector"), labels[name]) for b in budgets):
            problems.append(f"Deployment/{name} runs {count} replicas without a PodDisruptionBudget")
    return problems


def secret_problems(where: str, key: str, value: Any) -> list[str]:
    """Credentials in one ConfigMap entry: by its name, in its text, or under a TOML key."""
    problems = []
    text = value if isinstance(value, str) else str(value)
    if SECRET_NAME.search(key) and not text.startswith("/"):
        problems.append(f"{where}: {key} looks like a credential: take it from a Secret")
    for pattern, what in SECRET_VALUE:
        if pattern.search(text):
            problems.append(f"{where}: {key} holds {what}: take it from a Secret")
    if key.endswith(".toml"):
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return problems  # check_k8s_workloads reports a file that is not TOML
        for path, item in toml_items(parsed):
            if SECRET_NAME.search(path.rsplit(".", 1)[-1]) and not str(item).startswith("/"):
                problems.append(f"{where}: {key}: [{path}] looks like a credential: take it from a Secret")
    return problems


def toml_items(table: dict, prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            yield from toml_items(value, path)
        else:
            yield path, value


def check_config_map_secrets(docs: list[dict]) -> list[str]:
    """No ConfigMap holds a password, secret key or token (ConfigMaps are readable by whoever may
    read the namespace's configuration, and are printed by `kubectl describe`)."""
    problems = []
    for name, config_map in sorted(cd.by_kind(docs, "ConfigMap").items()):
        for key, value in sorted((config_map.get("data") or {}).items()):
            problems += secret_problems(f"ConfigMap/{name}", key, value)
    return problems


def runtime_settings(docs: list[dict]) -> Iterable[tuple[dict, dict, dict]]:
    """(Deployment, container, parsed configuration file or {}) of every runtime."""
    for dep, c, service in cd.toolplane_containers(docs):
        if service.name == "runtime":
            config, _ = cd.mounted_config(docs, dep, c, service)
            yield dep, c, config or {}


def check_runtime_cluster(docs: list[dict]) -> list[str]:
    """The runtime's drain fits in its grace period; replicas over a shared store fence and
    forward (run leases, an advertised pod URL); with leases its Service has no affinity."""
    problems = []
    counts = min_replicas(docs)
    for dep, c, config in runtime_settings(docs):
        name = dep["metadata"]["name"]
        where = f"Deployment/{name}"
        cluster = config.get("cluster") or {}
        drain_ms = cluster.get("drain_ms", DEFAULT_DRAIN_MS)
        grace = dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        if grace * 1000 <= drain_ms:
            problems.append(f"{where}: terminationGracePeriodSeconds {grace} is not above [cluster] drain_ms "
                            f"{drain_ms}: the kubelet kills it before it hands its runs over")
        if cd.store_is_shared(config.get("store")) and counts.get(name, 1) > 1 and not cluster.get("leases"):
            problems.append(f"{where}: {counts[name]} replicas over a shared [store] without [cluster] leases")
        if cluster.get("leases"):
            problems += advertise_problems(where, c, cluster)
            problems += affinity_problems(docs, name)
    return problems


def advertise_problems(where: str, container: dict, cluster: dict) -> list[str]:
    """With leases, the runtime advertises `http://$(POD_IP):7410`, POD_IP from the downward API:
    a Service name would reach any replica, not this one."""
    env = {item["name"]: item for item in container.get("env") or []}
    value = (env.get(ADVERTISE_VAR) or {}).get("value") or cluster.get("advertise", "")
    if not value:
        return [f"{where}: runs leases but sets neither {ADVERTISE_VAR} nor [cluster] advertise: "
                f"requests for its runs on other replicas are refused"]
    url = urlparse(value)
    host = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", url.netloc.rsplit(":", 1)[0])
    field = ((env.get(host.group(1)) or {}).get("valueFrom") or {}).get("fieldRef", {}) if host else {}
    problems = []
    if field.get("fieldPath") != "status.podIP":
        problems.append(f"{where}: {ADVERTISE_VAR}={value} is not the pod's IP (a variable from status.podIP)")
    if url.port != cd.SERVICES["runtime"].grpc:
        problems.append(f"{where}: {ADVERTISE_VAR}={value} is not the gRPC port {cd.SERVICES['runtime'].grpc}")
    return problems


def affinity_problems(docs: list[dict], deployment: str) -> list[str]:
    labels = cd.pod_labels(docs)[deployment]
    problems = []
    for name, svc in sorted(cd.by_kind(docs, "Service").items()):
        selector = svc["spec"].get("selector") or {}
        affinity = svc["spec"].get("sessionAffinity", "None")
        if selector and cd.selector_matches({"matchLabels": selector}, labels) and affinity != "None":
            problems.append(f"Service/{name}: sessionAffinity {affinity} although the runtime forwards "
                            f"each run to its driver (run leases)")
    return problems


def secret_key_refs(docs: list[dict]) -> Iterable[tuple[str, dict]]:
    for dep in cd.by_kind(docs, "Deployment").values():
        for c in dep["spec"]["template"]["spec"].get("containers") or []:
            for item in c.get("env") or []:
                ref = (item.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    yield f"Deployment/{dep['metadata']['name']} {item['name']}", ref


def check_secret_keys(docs: list[dict], template: dict | None = None) -> list[str]:
    """Every Secret key a container reads is one the store Secret's template documents."""
    template = template if template is not None else cd.load_yaml(cd.DEPLOY / SECRET_TEMPLATE)
    name = template["metadata"]["name"]
    keys = set(template.get("stringData") or {}) | set(template.get("data") or {})
    problems = []
    for where, ref in secret_key_refs(docs):
        if ref.get("name") != name:
            problems.append(f"{where}: reads the Secret {ref.get('name')}, which no template in deploy/ describes")
        elif ref.get("key") not in keys:
            problems.append(f"{where}: key {ref.get('key')} is not in {SECRET_TEMPLATE}")
    return problems


def check_secret_template(template: dict, cluster_docs: list[dict], kustomizations: list[Path]) -> list[str]:
    """The template is a valid Secret of the namespace, holds placeholders only (`<…>`), is not
    rendered by any kustomization, and documents every key the cluster overlay reads."""
    problems = []
    for version in cd.K8S_VERSIONS:
        problems += [f"{version[:-2]}: {p}" for p in cd.check_k8s_schema([template], version)]
    if template.get("kind") != "Secret" or template["metadata"].get("namespace") != cd.NAMESPACE:
        problems.append(f"{SECRET_TEMPLATE} is not a Secret of the namespace {cd.NAMESPACE}")
    for key, value in sorted((template.get("stringData") or {}).items()):
        if not re.fullmatch(r"<[^<>]+>", str(value)):
            problems.append(f"{SECRET_TEMPLATE}: {key} holds a value, not a <placeholder>")
    if template.get("data"):
        problems.append(f"{SECRET_TEMPLATE}: `data` holds encoded values; use `stringData` placeholders")
    file_name = Path(SECRET_TEMPLATE).name
    for directory in kustomizations:
        resources = (cd.load_yaml(directory / "kustomization.yaml") or {}).get("resources") or []
        if file_name in resources:
            problems.append(f"{directory.relative_to(cd.DEPLOY)} applies {file_name}: a template is never applied")
    if not list(secret_key_refs(cluster_docs)):
        problems.append("the cluster overlay reads no store credential from a Secret")
    problems += check_secret_keys(cluster_docs, template)
    return problems
