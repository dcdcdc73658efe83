#!/usr/bin/env python3
"""Tests of check_cluster.py and of what check_deploy.py checks differently in the cluster
overlay: the real overlay passes, and each rule fails on a copy broken the way a person could
break it (an affinity left on, a budget forgotten, a password pasted into a ConfigMap, a drain
longer than the grace period, …).

Run by check_deploy.py's self-test, with the deploy-check virtualenv's Python.
"""

from __future__ import annotations

import copy
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_cluster as cc  # noqa: E402
import check_deploy as cd  # noqa: E402

CLUSTER = "k8s/overlays/cluster"


def deployment(docs: list[dict], name: str) -> dict:
    return cd.by_kind(docs, "Deployment")[f"toolplane-{name}"]


def container(docs: list[dict], name: str) -> dict:
    return deployment(docs, name)["spec"]["template"]["spec"]["containers"][0]


def config_files(docs: list[dict]) -> dict:
    return cd.by_kind(docs, "ConfigMap")["toolplane-config"]["data"]


class ClusterOverlay(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.docs = cd.render_kustomization(CLUSTER)
        cls.base = cd.render_kustomization("k8s/base")
        cls.template = cd.load_yaml(cd.DEPLOY / cc.SECRET_TEMPLATE)

    def copy(self) -> list[dict]:
        return copy.deepcopy(self.docs)

    def assertFlags(self, problems: list[str], fragment: str) -> None:
        self.assertTrue(any(fragment in p for p in problems), f"expected a problem with {fragment!r}, got {problems}")

    def test_real_overlay_passes(self) -> None:
        self.assertEqual(cd.check_k8s_workloads(self.docs), [])
        self.assertEqual(cd.check_network_policy(self.docs), [])
        self.assertEqual(cd.check_k8s_auth(self.docs), [])
        self.assertEqual(cc.check_scale_out(self.docs), [])
        self.assertEqual(cc.check_scale_out(self.base), [])
        kustomizations = [cd.DEPLOY / k for k in cd.KUSTOMIZATIONS]
        self.assertEqual(cc.check_secret_template(self.template, self.docs, kustomizations), [])

    def test_what_the_overlay_changes(self) -> None:
        # What a reader of docs/deploy.md is promised: every service on shared-store replicas.
        replicas = cc.min_replicas(self.docs)
        self.assertEqual(replicas["toolplane-workspace"], 2)
        self.assertEqual(replicas["toolplane-mcp-proxy"], 2)
        self.assertGreaterEqual(replicas["toolplane-runtime"], 2)
        self.assertNotIn("sessionAffinity", cd.by_kind(self.docs, "Service")["toolplane-runtime"]["spec"])
        for name in ("mcp-proxy", "workspace"):
            self.assertEqual(deployment(self.docs, name)["spec"]["strategy"]["type"], "RollingUpdate")
        self.assertIn("[store]", config_files(self.docs)["workspace.toml"])
        claims = set(cd.by_kind(self.docs, "PersistentVolumeClaim"))
        self.assertEqual(claims, {"toolplane-auth-tokens"})

    def test_session_affinity(self) -> None:
        docs = self.copy()
        cd.by_kind(docs, "Service")["toolplane-runtime"]["spec"]["sessionAffinity"] = "ClientIP"
        self.assertFlags(cc.check_scale_out(docs), "Service/toolplane-runtime: sessionAffinity ClientIP")
        # Without leases (the base) the affinity is what keeps a client on its run's replica.
        self.assertEqual(cc.check_runtime_cluster(self.base), [])

    def test_multi_replica_deployment_without_budget(self) -> None:
        docs = [d for d in self.copy() if not (d["kind"] == "PodDisruptionBudget"
                                               and d["metadata"]["name"] == "toolplane-mcp-proxy")]
        self.assertFlags(cc.check_scale_out(docs), "Deployment/toolplane-mcp-proxy runs 2 replicas without a PodDisruptionBudget")
        docs = [d for d in self.copy() if not (d["kind"] == "PodDisruptionBudget"
                                               and d["metadata"]["name"] == "toolplane-runtime")]
        self.assertFlags(cc.check_scale_out(docs), "Deployment/toolplane-runtime runs 2 replicas")
        # One replica needs none.
        docs = self.copy()
        docs = [d for d in docs if not (d["kind"] == "PodDisruptionBudget" and d["metadata"]["name"] == "toolplane-mcp-proxy")]
        deployment(docs, "mcp-proxy")["spec"]["replicas"] = 1
        self.assertEqual(cc.check_disruption_budgets(docs), [])

    def test_secret_in_config_map(self) -> None:
        cases = [
            ("toolplane-runtime", "PGPASSWORD", "hunter2", "PGPASSWORD looks like a credential"),
            ("toolplane-catalog", "AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI", "looks like a credential"),
            ("toolplane-catalog", "TOOLPLANE_PEER_TOKEN", "tp_0123456789abcdef0123", "a toolplane token"),
            ("toolplane-config", "runtime.toml",
             '[store]\nkind = "postgres"\nconnection = "host=db user=toolplane password=hunter2"\n', "holds a password"),
            ("toolplane-config", "catalog.toml",
             '[store]\nkind = "postgres"\nconnection = "postgresql://toolplane:hunter2@db/toolplane"\n',
             "a URL with a password"),
            ("toolplane-config", "mcp-proxy.toml",
             '[store]\nkind = "s3"\nbucket = "b"\nsecret_access_key = "wJalr"\n', "[store.secret_access_key]"),
            ("toolplane-telemetry", "NOTE", "AWS_ACCESS_KEY_ID=AKIAABCDEFGHIJKLMNOP", "an AWS access key id"),
        ]
        for config_map, key, value, fragment in cases:
            with self.subTest(key=key):
                docs = self.copy()
                cd.by_kind(docs, "ConfigMap")[config_map]["data"][key] = value
                self.assertFlags(cc.check_config_map_secrets(docs), fragment)
        # Paths to credential files are not credentials.
        docs = self.copy()
        cd.by_kind(docs, "ConfigMap")["toolplane-runtime"]["data"]["TOOLPLANE_PEER_TOKEN_FILE"] = "/var/run/x/token"
        self.assertEqual(cc.check_config_map_secrets(docs), [])

    def test_grace_period_not_above_drain(self) -> None:
        docs = self.copy()
        deployment(docs, "runtime")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20
        self.assertFlags(cc.check_scale_out(docs), "terminationGracePeriodSeconds 20 is not above [cluster] drain_ms 20000")
        docs = self.copy()
        config_files(docs)["runtime.toml"] = config_files(docs)["runtime.toml"].replace("drain_ms = 20000", "drain_ms = 60000")
        self.assertFlags(cc.check_scale_out(docs), "drain_ms 60000")
        # Unset, drain_ms is the runtime's default 20 s.
        docs = self.copy()
        config_files(docs)["runtime.toml"] = config_files(docs)["runtime.toml"].replace("drain_ms = 20000", "")
        deployment(docs, "runtime")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 15
        self.assertFlags(cc.check_scale_out(docs), "terminationGracePeriodSeconds 15 is not above [cluster] drain_ms 20000")

    def test_leases_and_advertise(self) -> None:
        docs = self.copy()
        config_files(docs)["runtime.toml"] = config_files(docs)["runtime.toml"].replace("leases = true", "leases = false")
        self.assertFlags(cc.check_scale_out(docs), "replicas over a shared [store] without [cluster] leases")
        docs = self.copy()
        env = container(docs, "runtime")["env"]
        env[:] = [e for e in env if e["name"] != cc.ADVERTISE_VAR]
        self.assertFlags(cc.check_scale_out(docs), "sets neither TOOLPLANE_RUNTIME_ADVERTISE")
        for value, fragment in (("http://toolplane-runtime:7410", "is not the pod's IP"),
                                ("http://$(POD_IP):7411", "is not the gRPC port 7410")):
            docs = self.copy()
            next(e for e in container(docs, "runtime")["env"] if e["name"] == cc.ADVERTISE_VAR)["value"] = value
            self.assertFlags(cc.check_scale_out(docs), fragment)
        docs = self.copy()
        pod_ip = next(e for e in container(docs, "runtime")["env"] if e["name"] == "POD_IP")
        pod_ip["valueFrom"]["fieldRef"]["fieldPath"] = "status.hostIP"
        self.assertFlags(cc.check_scale_out(docs), "is not the pod's IP")

    def test_runtime_peers_in_network_policy(self) -> None:
        docs = [d for d in self.copy() if d["metadata"]["name"] != "toolplane-runtime-peers"]
        self.assertFlags(cd.check_network_policy(docs), "toolplane-runtime gRPC port admits")

    def test_store_replaces_volumes(self) -> None:
        docs = self.copy()
        cd.by_kind(docs, "ConfigMap")["toolplane-catalog"]["data"]["TOOLPLANE_CATALOG_DATA_DIR"] = "/tmp"
        self.assertFlags(cd.check_k8s_workloads(docs), "TOOLPLANE_CATALOG_DATA_DIR overrides the [store]")
        docs = self.copy()
        config_files(docs)["mcp-proxy.toml"] = '[store]\nkind = "fs"\nroot = "/var/lib/toolplane/mcp-proxy"\n'
        self.assertFlags(cd.check_k8s_workloads(docs), "toolplane-mcp-proxy: must run exactly one replica")
        docs = self.copy()
        config_files(docs)["runtime.toml"] = "[store\n"
        self.assertFlags(cd.check_k8s_workloads(docs), "not TOML")
        docs = self.copy()
        del config_files(docs)["catalog.toml"]
        self.assertFlags(cd.check_k8s_workloads(docs), "has no key catalog.toml")

    def test_secret_keys_and_template(self) -> None:
        docs = self.copy()
        ref = next(e for e in container(docs, "runtime")["env"] if e["name"] == "PGPASSWORD")
        ref["valueFrom"]["secretKeyRef"]["key"] = "password"
        self.assertFlags(cc.check_scale_out(docs), "key password is not in")
        ref["valueFrom"]["secretKeyRef"]["name"] = "postgres-credentials"
        self.assertFlags(cc.check_scale_out(docs), "reads the Secret postgres-credentials")
        kustomizations = [cd.DEPLOY / k for k in cd.KUSTOMIZATIONS]
        template = copy.deepcopy(self.template)
        template["stringData"]["PGPASSWORD"] = "hunter2"
        self.assertFlags(cc.check_secret_template(template, self.docs, kustomizations), "not a <placeholder>")
        template = copy.deepcopy(self.template)
        template["stringData"]["PGPASSWORD"] = ["<x>"]
        self.assertFlags(cc.check_secret_template(template, self.docs, kustomizations), "stringData")
        template = copy.deepcopy(self.template)
        del template["stringData"]["AWS_SECRET_ACCESS_KEY"]
        self.assertFlags(cc.check_secret_template(template, self.docs, kustomizations), "key AWS_SECRET_ACCESS_KEY is not in")
        self.assertFlags(cc.check_secret_template(self.template, self.base, kustomizations), "reads no store credential")

    def test_helper_variables_are_not_the_binary_s(self) -> None:
        self.assertEqual(cd.helper_variables(container(self.docs, "runtime")), {"POD_IP"})
        sources = {name: "" for name in cd.SERVICES}
        problems, _ = cd.check_env_contract({}, self.docs, sources, "")
        self.assertFalse(any("POD_IP" in p for p in problems), problems)
        self.assertFlags(problems, "toolplane-runtime does not read")
        self.assertTrue(any("TOOLPLANE_RUNTIME_ADVERTISE" in p for p in problems), problems)
        sources["runtime"] = '"TOOLPLANE_RUNTIME_ADVERTISE"'
        problems, _ = cd.check_env_contract({}, self.docs, sources, "")
        self.assertFalse(any("TOOLPLANE_RUNTIME_ADVERTISE" in p.split("(it reads")[0] for p in problems), problems)


if __name__ == "__main__":
    unittest.main()
