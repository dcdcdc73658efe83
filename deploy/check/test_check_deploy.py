#!/usr/bin/env python3
"""Tests of check_deploy.py: each check passes on the real deploy files (where it does not
depend on other crates' sources) and fails on a copy broken the way a person could break it.
A check that cannot fail would prove nothing.

Run by check_deploy.py as its first check, with the deploy-check virtualenv's Python.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
import unittest
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_deploy as cd  # noqa: E402


def deployment(docs: list[dict], name: str) -> dict:
    return cd.by_kind(docs, "Deployment")[f"toolplane-{name}"]


def container(docs: list[dict], name: str) -> dict:
    return deployment(docs, name)["spec"]["template"]["spec"]["containers"][0]


def policy(docs: list[dict], name: str) -> dict:
    return cd.by_kind(docs, "NetworkPolicy")[name]


class Fixtures(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dockerfile = (cd.DEPLOY / "Dockerfile").read_text(encoding="utf-8")
        cls.composes = cd.load_compose()
        cls.k8s = cd.render_kustomization("k8s/base")
        cls.schema = cd.compose_schema()
        cls.dashboard = json.loads((cd.DEPLOY / "grafana/dashboards/toolplane.json").read_text(encoding="utf-8"))
        cls.otel = cd.load_yaml(cd.DEPLOY / "otel-collector/config.yaml")
        cls.prometheus = cd.load_yaml(cd.DEPLOY / "prometheus/prometheus.yml")
        cls.datasources = cd.load_yaml(cd.DEPLOY / "grafana/provisioning/datasources/datasources.yaml")
        cls.providers = cd.load_yaml(cd.DEPLOY / "grafana/provisioning/dashboards/dashboards.yaml")
        cls.docs_text = (cd.ROOT / "docs/deploy.md").read_text(encoding="utf-8")

    def k8s_copy(self) -> list[dict]:
        return copy.deepcopy(self.k8s)

    def compose_copy(self) -> dict:
        return copy.deepcopy(self.composes["compose.yaml"])

    def assertFlags(self, problems: list[str], fragment: str) -> None:
        self.assertTrue(any(fragment in p for p in problems), f"expected a problem with {fragment!r}, got {problems}")


class ImageReferences(Fixtures):
    def test_pinned_and_unpinned_references(self) -> None:
        for ref in ("toolplane:0.1.0", "reg.example:5000/a/b:1.2", "debian:bookworm-slim",
                    "x@sha256:" + "a" * 64, "x:1@sha256:" + "b" * 64):
            self.assertIsNone(cd.image_problem(ref), ref)
        for ref in ("toolplane", "toolplane:latest", "reg.example:5000/toolplane", "x@sha256:zz", "", "${IMAGE}"):
            self.assertIsNotNone(cd.image_problem(ref), ref)

    def test_images_check_on_every_source(self) -> None:
        self.assertEqual(cd.check_images(cd.all_image_refs(self.dockerfile, self.composes, {"base": self.k8s}), {}), [])
        k8s = self.k8s_copy()
        container(k8s, "runtime")["image"] = "toolplane:latest"
        self.assertFlags(cd.check_images(cd.all_image_refs(self.dockerfile, self.composes, {"base": k8s}), {}), "latest")
        composes = copy.deepcopy(self.composes)
        composes["compose.yaml"]["services"]["jaeger"]["image"] = "jaegertracing/jaeger"
        self.assertFlags(cd.check_images(cd.all_image_refs(self.dockerfile, composes, {}), {}), "no tag")
        dockerfile = self.dockerfile.replace("FROM debian:bookworm-slim AS base", "FROM debian AS base")
        self.assertFlags(cd.check_images(cd.all_image_refs(dockerfile, {}, {}), {}), "no tag")
        self.assertFlags(cd.check_images([], {"x.yaml": "image: foo:latest\n"}), "x.yaml:1")


class Dockerfile(Fixtures):
    def test_real_dockerfile_passes(self) -> None:
        self.assertEqual(cd.check_dockerfile_images(self.dockerfile), [])
        self.assertEqual(cd.check_dockerfile_user(self.dockerfile, self.composes.values(), {10001}), [])
        self.assertEqual(cd.check_dockerfile_binaries(self.dockerfile, cd.workspace_binaries()), [])

    def test_latest_base_image(self) -> None:
        broken = self.dockerfile.replace("rust:1.95-slim-bookworm", "rust:latest")
        self.assertFlags(cd.check_dockerfile_images(broken), "latest")

    def test_root_user(self) -> None:
        # The last USER of the shipped base stage removed: every target inherits root.
        broken = self.dockerfile.replace("USER 10001:10001\n# gRPC", "# gRPC")
        self.assertFlags(cd.check_dockerfile_user(broken, self.composes.values(), {10001}), "root")
        # The mcp variant forgetting to switch back from root.
        lines = self.dockerfile.split("USER 10001:10001\n")
        broken = "USER 10001:10001\n".join(lines[:-1]) + lines[-1]
        self.assertFlags(cd.check_dockerfile_user(broken, self.composes.values(), {10001}), "'mcp' runs as root")

    def test_named_user_and_uid_mismatch(self) -> None:
        broken = self.dockerfile.replace("USER 10001:10001\n# gRPC", "USER toolplane\n# gRPC")
        self.assertFlags(cd.check_dockerfile_user(broken, self.composes.values(), {10001}), "numeric")
        self.assertFlags(cd.check_dockerfile_user(self.dockerfile, self.composes.values(), {1000}), "differs")

    def test_unknown_build_target(self) -> None:
        composes = copy.deepcopy(self.composes)
        composes["compose.mcp.yaml"]["services"]["mcp-proxy"]["build"]["target"] = "nodejs"
        self.assertFlags(cd.check_dockerfile_user(self.dockerfile, composes.values(), {10001}), "not a stage")

    def test_binaries(self) -> None:
        binaries = cd.workspace_binaries()
        self.assertIn("toolplane-runtime", binaries)
        missing = self.dockerfile.replace(" toolplane-workspace ", " ")
        self.assertFlags(cd.check_dockerfile_binaries(missing, binaries), "toolplane-workspace")
        extra = self.dockerfile.replace('bins="toolplane-catalog', 'bins="toolplane-gateway toolplane-catalog')
        self.assertFlags(cd.check_dockerfile_binaries(extra, binaries), "toolplane-gateway")
        no_cli = self.dockerfile.replace('bins="$bins toolplane"', 'bins="$bins"')
        self.assertFlags(cd.check_dockerfile_binaries(no_cli, binaries), "CLI")


class Compose(Fixtures):
    def test_real_files_pass(self) -> None:
        for compose in self.composes.values():
            self.assertEqual(cd.check_compose_schema(compose, self.schema), [])
            self.assertEqual(cd.check_compose_mounts(compose, cd.DEPLOY), [])
        self.assertEqual(cd.check_compose_services(self.composes["compose.yaml"]), [])

    def test_compose_loader(self) -> None:
        self.assertEqual(cd.check_compose_config([cd.DEPLOY / f for f in cd.COMPOSE_FILES]), [])
        with tempfile.TemporaryDirectory() as tmp:
            compose = self.compose_copy()
            compose["services"]["runtime"]["depends_on"]["mcp-proxyy"] = {"condition": "service_started"}
            path = Path(tmp) / "compose.yaml"
            path.write_text(yaml.safe_dump(compose), encoding="utf-8")
            self.assertFlags(cd.check_compose_config([path]), "mcp-proxyy")
            compose = self.compose_copy()
            compose["services"]["workspace"]["volumes"] = ["workspace-state:/var/lib/toolplane/workspace"]
            path.write_text(yaml.safe_dump(compose), encoding="utf-8")
            self.assertFlags(cd.check_compose_config([path]), "workspace-state")

    def test_schema_rejects_unknown_and_mistyped_fields(self) -> None:
        compose = self.compose_copy()
        compose["services"]["runtime"]["restart_policy"] = "always"
        self.assertFlags(cd.check_compose_schema(compose, self.schema), "restart_policy")
        compose = self.compose_copy()
        compose["services"]["runtime"]["depends_on"] = "catalog"
        self.assertTrue(cd.check_compose_schema(compose, self.schema))

    def test_missing_mount_source(self) -> None:
        compose = self.compose_copy()
        compose["services"]["prometheus"]["volumes"][0] = "./prometheus/missing.yml:/etc/prometheus/prometheus.yml:ro"
        self.assertFlags(cd.check_compose_mounts(compose, cd.DEPLOY), "missing.yml")

    def test_authentication(self) -> None:
        self.assertEqual(cd.check_compose_auth(self.compose_copy()), [])
        compose = self.compose_copy()
        compose["services"]["mcp-proxy"]["command"] = ["toolplane-mcp-proxy"]
        self.assertFlags(cd.check_compose_auth(compose), "mcp-proxy: does not run with --auth")
        compose = self.compose_copy()
        compose["services"]["runtime"]["environment"][cd.INSECURE_VAR] = "true"
        self.assertFlags(cd.check_compose_auth(compose), "runtime: serves without authentication")
        compose = self.compose_copy()
        compose["services"]["catalog"]["environment"][cd.PEER_TOKEN_VAR] = "/tmp/other"
        self.assertFlags(cd.check_compose_auth(compose), "catalog: TOOLPLANE_PEER_TOKEN_FILE")
        compose = self.compose_copy()
        compose["services"]["workspace"]["volumes"] = ["workspace-data:/var/lib/toolplane/workspace"]
        problems = cd.check_compose_auth(compose)
        self.assertFlags(problems, "workspace: TOOLPLANE_AUTH_SERVICE_TOKEN_FILE")
        self.assertFlags(problems, "workspace: TOOLPLANE_AUTH_TOKENS")

    def test_services_wiring(self) -> None:
        compose = self.compose_copy()
        compose["services"]["runtime"]["ports"] = ["7410:7410"]
        self.assertFlags(cd.check_compose_services(compose), "beyond the host's loopback")
        compose = self.compose_copy()
        compose["services"]["grafana"]["ports"] = ["3000:3000"]
        self.assertFlags(cd.check_compose_services(compose), "grafana")
        compose = self.compose_copy()
        compose["services"]["workspace"]["environment"]["TOOLPLANE_WORKSPACE_LISTEN"] = "127.0.0.1:7430"
        self.assertFlags(cd.check_compose_services(compose), "not reachable")
        compose = self.compose_copy()
        compose["services"]["runtime"]["environment"]["TOOLPLANE_WORKSPACE_URL"] = "http://workspace:7431"
        self.assertFlags(cd.check_compose_services(compose), "gRPC port 7430")
        compose = self.compose_copy()
        compose["services"]["runtime"]["environment"]["TOOLPLANE_MCP_PROXY_URL"] = "http://catalog:7420"
        self.assertFlags(cd.check_compose_services(compose), "does not name the mcp-proxy")
        compose = self.compose_copy()
        compose["services"]["workspace"]["volumes"] = []
        self.assertFlags(cd.check_compose_services(compose), "not on a volume")
        compose = self.compose_copy()
        del compose["services"]["mcp-proxy"]
        self.assertFlags(cd.check_compose_services(compose), "toolplane-mcp-proxy")


class Kubernetes(Fixtures):
    def test_real_manifests_pass(self) -> None:
        for version in cd.K8S_VERSIONS:
            self.assertEqual(cd.check_k8s_schema(self.k8s, version), [])
        self.assertEqual(cd.check_k8s_workloads(self.k8s), [])
        self.assertEqual(cd.check_network_policy(self.k8s), [])

    def test_strict_schema_rejects_a_typo(self) -> None:
        k8s = self.k8s_copy()
        probe = container(k8s, "runtime")["readinessProbe"]
        probe["grpcc"] = probe.pop("grpc")
        self.assertFlags(cd.check_k8s_schema(k8s, "1.30.0"), "toolplane-runtime")
        k8s = self.k8s_copy()
        container(k8s, "catalog")["resources"]["requests"]["cpu"] = ["100m"]
        self.assertFlags(cd.check_k8s_schema(k8s, "1.37.0"), "toolplane-catalog")

    def test_probes(self) -> None:
        k8s = self.k8s_copy()
        del container(k8s, "workspace")["livenessProbe"]
        self.assertFlags(cd.check_k8s_workloads(k8s), "livenessProbe is not a gRPC health probe")
        k8s = self.k8s_copy()
        container(k8s, "catalog")["readinessProbe"] = {"tcpSocket": {"port": 7420}}
        self.assertFlags(cd.check_k8s_workloads(k8s), "readinessProbe")
        k8s = self.k8s_copy()
        container(k8s, "mcp-proxy")["startupProbe"]["grpc"]["port"] = 7441
        self.assertFlags(cd.check_k8s_workloads(k8s), "checks port 7441")

    def test_resources_and_security(self) -> None:
        k8s = self.k8s_copy()
        del container(k8s, "runtime")["resources"]["requests"]["cpu"]
        problems = cd.check_k8s_workloads(k8s)
        self.assertFlags(problems, "no cpu request")
        self.assertFlags(problems, "HorizontalPodAutoscaler/toolplane-runtime: container runtime has no CPU request")
        k8s = self.k8s_copy()
        del deployment(k8s, "workspace")["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
        self.assertFlags(cd.check_k8s_workloads(k8s), "runAsNonRoot")
        k8s = self.k8s_copy()
        del deployment(k8s, "catalog")["spec"]["template"]["spec"]["enableServiceLinks"]
        self.assertFlags(cd.check_k8s_workloads(k8s), "enableServiceLinks")
        k8s = self.k8s_copy()
        container(k8s, "mcp-proxy")["securityContext"]["allowPrivilegeEscalation"] = True
        self.assertFlags(cd.check_k8s_workloads(k8s), "allowPrivilegeEscalation")

    def test_replicas_and_storage(self) -> None:
        k8s = self.k8s_copy()
        deployment(k8s, "workspace")["spec"]["replicas"] = 2
        self.assertFlags(cd.check_k8s_workloads(k8s), "exactly one replica")
        k8s = self.k8s_copy()
        deployment(k8s, "mcp-proxy")["spec"]["strategy"] = {"type": "RollingUpdate"}
        self.assertFlags(cd.check_k8s_workloads(k8s), "Recreate")
        k8s = self.k8s_copy()
        deployment(k8s, "runtime")["spec"]["replicas"] = 3
        self.assertFlags(cd.check_k8s_workloads(k8s), "sets replicas although an HPA scales it")
        k8s = [d for d in self.k8s_copy() if d["metadata"]["name"] != "toolplane-catalog"
               or d["kind"] != "HorizontalPodAutoscaler"]
        self.assertFlags(cd.check_k8s_workloads(k8s), "has no HorizontalPodAutoscaler")
        k8s = self.k8s_copy()
        volumes = deployment(k8s, "workspace")["spec"]["template"]["spec"]["volumes"]
        volumes[:] = [{"name": "data", "emptyDir": {}} if v["name"] == "data" else v for v in volumes]
        self.assertFlags(cd.check_k8s_workloads(k8s), "not on a PersistentVolumeClaim")
        k8s = [d for d in self.k8s_copy() if d["metadata"]["name"] != "toolplane-workspace-data"]
        self.assertFlags(cd.check_k8s_workloads(k8s), "PersistentVolumeClaim toolplane-workspace-data does not exist")

    def test_references(self) -> None:
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "Service")["toolplane-runtime"]["spec"]["ports"][0]["targetPort"] = "grcp"
        self.assertFlags(cd.check_k8s_workloads(k8s), "targetPort grcp")
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "HorizontalPodAutoscaler")["toolplane-runtime"]["spec"]["scaleTargetRef"]["name"] = "runtime"
        self.assertFlags(cd.check_k8s_workloads(k8s), "does not exist")
        k8s = self.k8s_copy()
        pdb = copy.deepcopy(cd.by_kind(k8s, "PodDisruptionBudget")["toolplane-catalog"])
        pdb["metadata"]["name"] = "toolplane-workspace"
        pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "toolplane-workspace"
        k8s.append(pdb)
        self.assertFlags(cd.check_k8s_workloads(k8s), "blocks node drains")
        k8s = [d for d in self.k8s_copy() if d["metadata"]["name"] != "toolplane-telemetry"]
        self.assertFlags(cd.check_k8s_workloads(k8s), "ConfigMap toolplane-telemetry does not exist")
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "ConfigMap")["toolplane-runtime"]["data"]["TOOLPLANE_CATALOG_URL"] = "http://toolplane-workspace:7430"
        self.assertFlags(cd.check_k8s_workloads(k8s), "does not select the catalog pods")
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "ConfigMap")["toolplane-catalog"]["data"]["TOOLPLANE_CATALOG_LISTEN"] = "0.0.0.0:7421"
        self.assertFlags(cd.check_k8s_workloads(k8s), "contract port 7420")

    def test_network_policy(self) -> None:
        k8s = self.k8s_copy()
        policy(k8s, "toolplane-workspace-ingress")["spec"]["ingress"][0]["from"].append(
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "toolplane-catalog"}}})
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-workspace gRPC port admits")
        k8s = self.k8s_copy()
        del policy(k8s, "toolplane-mcp-proxy-ingress")["spec"]["ingress"][0]["from"][1]
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-mcp-proxy gRPC port admits")
        k8s = self.k8s_copy()
        policy(k8s, "toolplane-mcp-proxy-ingress")["spec"]["ingress"][0]["from"].append(
            {"namespaceSelector": {"matchLabels": {"team": "agents"}}})
        self.assertFlags(cd.check_network_policy(k8s), "other namespaces")
        k8s = self.k8s_copy()
        policy(k8s, "toolplane-workspace-ingress")["spec"]["ingress"][0]["ports"] = []
        # Without ports the rule still admits only the runtime: allowed.
        self.assertEqual(cd.check_network_policy(k8s), [])
        k8s = self.k8s_copy()
        del policy(k8s, "toolplane-workspace-ingress")["spec"]["ingress"][0]["from"]
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-workspace gRPC port admits")
        # The metrics policy must not open the service ports.
        k8s = self.k8s_copy()
        policy(k8s, "toolplane-metrics-ingress")["spec"]["ingress"][0]["ports"].append({"protocol": "TCP", "port": 7430})
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-workspace gRPC port admits")
        k8s = [d for d in self.k8s_copy() if d.get("kind") != "NetworkPolicy"
               or d["metadata"]["name"] not in ("toolplane-default-deny-ingress", "toolplane-metrics-ingress",
                                                "toolplane-runtime-ingress")]
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-runtime port 7410: no NetworkPolicy")
        k8s = self.k8s_copy()
        policy(k8s, "toolplane-catalog-ingress")["spec"]["ingress"][0]["from"] = [
            {"podSelector": {"matchLabels": {"role": "host"}}}]
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-catalog gRPC port admits")
        # Any pod of the namespace may no longer reach the runtime or the catalog.
        for name in ("toolplane-runtime-ingress", "toolplane-catalog-ingress"):
            k8s = self.k8s_copy()
            policy(k8s, name)["spec"]["ingress"][0]["from"].append({"podSelector": {}})
            self.assertFlags(cd.check_network_policy(k8s), "(any pod of the namespace)")
        # Nor namespaces other than the agent hosts'.
        k8s = self.k8s_copy()
        policy(k8s, "toolplane-runtime-ingress")["spec"]["ingress"][0]["from"][0] = {
            "namespaceSelector": {"matchLabels": {"team": "agents"}}}
        self.assertFlags(cd.check_network_policy(k8s), "toolplane-runtime gRPC port admits")

    def test_authentication(self) -> None:
        self.assertEqual(cd.check_k8s_auth(self.k8s), [])
        for service in cd.SERVICES:
            k8s = self.k8s_copy()
            container(k8s, service)["args"] = [a for a in container(k8s, service)["args"] if a != "--auth"]
            self.assertFlags(cd.check_k8s_auth(k8s), f"toolplane-{service}: does not run with --auth")
            k8s = self.k8s_copy()
            cd.by_kind(k8s, "ConfigMap")[f"toolplane-{service}"]["data"][cd.INSECURE_VAR] = "true"
            self.assertFlags(cd.check_k8s_auth(k8s), "serves without authentication")
        k8s = self.k8s_copy()
        container(k8s, "workspace")["args"].append(cd.INSECURE_FLAG)
        self.assertFlags(cd.check_k8s_auth(k8s), "serves without authentication")
        k8s = self.k8s_copy()
        del cd.by_kind(k8s, "ConfigMap")["toolplane-runtime"]["data"][cd.PEER_TOKEN_VAR]
        self.assertFlags(cd.check_k8s_auth(k8s), "TOOLPLANE_PEER_TOKEN_FILE is not the service token file")
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "ConfigMap")["toolplane-mcp-proxy"]["data"][cd.SERVICE_TOKEN_VAR] = "/etc/token"
        self.assertFlags(cd.check_k8s_auth(k8s), "is not on a mounted secret")
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "ConfigMap")["toolplane-catalog"]["data"][cd.TOKENS_VAR] = "/var/lib/toolplane/catalog/auth"
        self.assertFlags(cd.check_k8s_auth(k8s), "different claims")
        k8s = self.k8s_copy()
        for v in deployment(k8s, "workspace")["spec"]["template"]["spec"]["volumes"]:
            if "secret" in v:
                v["secret"]["secretName"] = "another"
        self.assertFlags(cd.check_k8s_auth(k8s), "different Secrets")

    def test_named_ports_and_expressions(self) -> None:
        names = {"grpc": 7430}
        self.assertTrue(cd.port_matches({"port": "grpc"}, 7430, names))
        self.assertFalse(cd.port_matches({"port": 7431}, 7430, names))
        self.assertTrue(cd.port_matches({"port": 7400, "endPort": 7450}, 7430, names))
        self.assertFalse(cd.port_matches({"protocol": "UDP", "port": 7430}, 7430, names))
        labels = {"app": "a", "tier": "x"}
        self.assertTrue(cd.selector_matches({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}, labels))
        self.assertFalse(cd.selector_matches({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, labels))
        self.assertTrue(cd.selector_matches({}, labels))
        self.assertFalse(cd.selector_matches(None, labels))


class Environment(Fixtures):
    def reads_everything(self) -> dict[str, str]:
        sources = {}
        for name, service in cd.SERVICES.items():
            variables = set()
            for _, svc, s in cd.compose_toolplane_services(self.composes["compose.yaml"]):
                if s == service:
                    variables |= set(cd.compose_env(svc))
            sources[name] = "\n".join(f'#[arg(env = "{v}")]' for v in sorted(variables)) + '\n"/metrics"'
        return sources

    def test_contract_met(self) -> None:
        problems, note = cd.check_env_contract(self.composes, self.k8s, self.reads_everything(), "")
        self.assertEqual(problems, [])
        self.assertEqual(note, "")

    def test_unread_variable(self) -> None:
        sources = self.reads_everything()
        sources["catalog"] = sources["catalog"].replace('"TOOLPLANE_CATALOG_LISTEN"', '"TOOLPLANE_CATALOG_GRPC_ADDR"')
        problems, _ = cd.check_env_contract(self.composes, self.k8s, sources, "")
        self.assertFlags(problems, "toolplane-catalog does not read TOOLPLANE_CATALOG_LISTEN")

    def test_every_service_reads_its_metrics_listener(self) -> None:
        sources = self.reads_everything()
        sources["workspace"] = sources["workspace"].replace('"TOOLPLANE_WORKSPACE_HTTP_LISTEN"', "")
        problems, _ = cd.check_env_contract(self.composes, self.k8s, sources, "")
        self.assertFlags(problems, "TOOLPLANE_WORKSPACE_HTTP_LISTEN")

    def test_compose_and_kubernetes_agree(self) -> None:
        k8s = self.k8s_copy()
        cd.by_kind(k8s, "ConfigMap")["toolplane-runtime"]["data"]["TOOLPLANE_RUNTIME_EXTRA"] = "1"
        sources = self.reads_everything()
        sources["runtime"] += '\n"TOOLPLANE_RUNTIME_EXTRA"'
        problems, _ = cd.check_env_contract(self.composes, k8s, sources, "")
        self.assertFlags(problems, "compose and Kubernetes set different variables: TOOLPLANE_RUNTIME_EXTRA")


class Observability(Fixtures):
    def check(self, **changes: object) -> list[str]:
        args = dict(compose=self.composes["compose.yaml"], otel=self.otel, prometheus=self.prometheus,
                    datasources=self.datasources, providers=self.providers, dashboard=self.dashboard)
        args.update(changes)
        return cd.check_observability(**args)

    def test_real_files_pass(self) -> None:
        self.assertEqual(self.check(), [])

    def test_breakage(self) -> None:
        prometheus = copy.deepcopy(self.prometheus)
        prometheus["scrape_configs"][0]["static_configs"].pop(1)
        self.assertFlags(self.check(prometheus=prometheus), "runtime:7411")
        otel = copy.deepcopy(self.otel)
        otel["service"]["pipelines"]["traces"]["exporters"] = ["otlp_grpc/tempo"]
        problems = self.check(otel=otel)
        self.assertFlags(problems, "otlp_grpc/tempo is not defined")
        self.assertFlags(problems, "otlp_grpc/jaeger is defined but unused")
        compose = self.compose_copy()
        compose["services"]["runtime"]["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://otel-collector:4318"
        self.assertFlags(self.check(compose=compose), "runtime: OTEL_EXPORTER_OTLP_ENDPOINT")
        dashboard = copy.deepcopy(self.dashboard)
        dashboard["panels"][1]["datasource"]["uid"] = "mimir"
        self.assertFlags(self.check(dashboard=dashboard), "data source mimir")
        providers = copy.deepcopy(self.providers)
        providers["providers"][0]["options"]["path"] = "/var/lib/grafana/dashboards"
        self.assertFlags(self.check(providers=providers), "is not mounted")


class Docs(Fixtures):
    def test_real_docs_pass(self) -> None:
        self.assertEqual(cd.check_docs(self.docs_text, self.dashboard, self.composes, self.k8s), [])

    def test_undocumented_metric_and_variable(self) -> None:
        dashboard = copy.deepcopy(self.dashboard)
        dashboard["panels"][1]["targets"][0]["expr"] = "sum(rate(toolplane_tool_timeouts_total[5m]))"
        problems = cd.check_docs(self.docs_text, dashboard, self.composes, self.k8s)
        self.assertFlags(problems, "toolplane_tool_timeouts_total is used by the dashboard")
        dashboard = copy.deepcopy(self.dashboard)
        for panel in dashboard["panels"]:
            for target in panel.get("targets") or []:
                if "toolplane_model_call_retries_total" in target["expr"]:
                    target["expr"] = 'up{job="toolplane"}'
        problems = cd.check_docs(self.docs_text, dashboard, self.composes, self.k8s)
        self.assertFlags(problems, "toolplane_model_call_retries_total is documented but no dashboard panel")
        text = self.docs_text.replace("`TOOLPLANE_CATALOG_PROFILES_DIR`", "TOOLPLANE_CATALOG_PROFILES_DIR")
        self.assertFlags(cd.check_docs(text, self.dashboard, self.composes, self.k8s), "TOOLPLANE_CATALOG_PROFILES_DIR")


if __name__ == "__main__":
    unittest.main()
