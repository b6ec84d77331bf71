#!/usr/bin/env python3
"""The ccm's resident memory with N kubelet-shaped Nodes on a real API server, with and
without kubelet heartbeats flowing (BENCHMARKS.md, "The ccm's node cache").

    ccm_rss.py KUBECONFIG NODES HEARTBEATS_PER_S SECONDS CCM_BINARY [CCM_BINARY ...]

Creates NODES Nodes shaped as a v1.33 kubelet writes them (40 images, nodeInfo, five
conditions; the same shape as `overcast_ccm::fixtures::kubelet_node`) unless they exist,
then for each binary in turn: starts it (`--controllers=node --leader-elect=false`, local
cloud), sends HEARTBEATS_PER_S status patches a second spread over the nodes (each one
rewrites the Ready condition's lastHeartbeatTime, as a kubelet does), and prints its VmRSS
and VmHWM every 10 s for SECONDS. Only the processes it starts are stopped.
"""

import datetime
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time

import yaml  # python3-yaml (Debian) / PyYAML


def kube(kubeconfig):
    cfg = yaml.safe_load(open(kubeconfig))
    cluster = cfg["clusters"][0]["cluster"]
    user = cfg["users"][0]["user"]
    host = cluster["server"].removeprefix("https://")
    ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
    ctx.load_cert_chain(user["client-certificate"], user["client-key"])
    return host, ctx


class Client:
    def __init__(self, kubeconfig):
        self.host, self.ctx = kube(kubeconfig)
        self.conn = http.client.HTTPSConnection(self.host, context=self.ctx)

    def call(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": ctype} if data else {}
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        out = resp.read()
        return resp.status, out


def node(i):
    images = [
        {
            "names": [
                f"registry.example.com/team/app-{k}@sha256:{k * 7919 + i:064x}",
                f"registry.example.com/team/app-{k}:v1.{k}.0",
            ],
            "sizeBytes": 123_456_789 + k,
        }
        for k in range(40)
    ]

    def cond(t, s):
        return {
            "type": t,
            "status": s,
            "lastHeartbeatTime": "2026-11-23T10:00:00Z",
            "lastTransitionTime": "2026-11-20T10:00:00Z",
            "reason": f"Kubelet{t}",
            "message": f"kubelet reports {t} = {s} on this node",
        }

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i}",
            "labels": {
                "kubernetes.io/hostname": f"node-{i}",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": "10.244.0.0/24"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32869348Ki", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "32766948Ki", "pods": "110"},
            "conditions": [
                cond("MemoryPressure", "False"),
                cond("DiskPressure", "False"),
                cond("PIDPressure", "False"),
                cond("Ready", "True"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"},
                {"type": "Hostname", "address": f"node-{i}"},
            ],
            "nodeInfo": {
                "machineID": f"{i:032x}",
                "systemUUID": f"{i:032x}",
                "bootID": f"{i:032x}",
                "kernelVersion": "6.1.0-27-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "v1.33.1",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    }


def ensure_nodes(kubeconfig, n):
    c = Client(kubeconfig)
    status, body = c.call("GET", "/api/v1/nodes?limit=1")
    have = json.loads(body).get("metadata", {}).get("remainingItemCount", 0) + len(
        json.loads(body).get("items", [])
    )
    if have >= n:
        return
    for i in range(n):
        c.call("POST", "/api/v1/nodes", node(i))
        # The kubelet writes status through the subresource; POST keeps it for Nodes.


def heartbeats(kubeconfig, n, rate, stop, sent):
    c = Client(kubeconfig)
    i = 0
    period = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = {"status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": now}]}}
        status, _ = c.call(
            "PATCH",
            f"/api/v1/nodes/node-{i % n}/status",
            patch,
            "application/strategic-merge-patch+json",
        )
        if status == 200:
            sent[0] += 1
        i += 1
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))


def rss(pid):
    out = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            out[k] = int(v.split()[0]) // 1024
    return out


def main():
    kubeconfig, n, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    binaries = sys.argv[5:]
    ensure_nodes(kubeconfig, n)
    for binary in binaries:
        proc = subprocess.Popen(
            [binary, "--kubeconfig", kubeconfig, "--controllers=node", "--leader-elect=false",
             "--metrics-address", "127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        stop, sent = threading.Event(), [0]
        t = None
        if rate > 0:
            t = threading.Thread(target=heartbeats, args=(kubeconfig, n, rate, stop, sent))
            t.start()
        try:
            for s in range(10, seconds + 1, 10):
                time.sleep(10)
                if proc.poll() is not None:
                    raise SystemExit(f"{binary} exited with {proc.returncode}")
                m = rss(proc.pid)
                print(f"{os.path.basename(binary)} t={s}s heartbeats={sent[0]} VmRSS={m['VmRSS']} MiB VmHWM={m['VmHWM']} MiB", flush=True)
        finally:
            stop.set()
            if t:
                t.join()
            proc.send_signal(signal.SIGTERM)
            proc.wait()


if __name__ == "__main__":
    main()
