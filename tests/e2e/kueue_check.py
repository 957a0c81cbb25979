"""A live check of the emulator's Kueue model (`kmock_cluster.py --kueue`), over HTTP.

Starts `kmock_cluster.py --kueue` (RBAC on: deploy/'s policy) with one 16-CPU node, then, as the
admin: creates a ResourceFlavor, two ClusterQueues in one cohort (`cq-a`: 4 CPUs, may borrow 2;
`cq-b`: 2 CPUs) and a LocalQueue for each, and checks
- an elastic Job created unsuspended is suspended and gated by the webhook, gets one Workload,
  is admitted, unsuspended, and its pods are ungated and run;
- a scale-up beyond the quota the cohort leaves is a pending slice (its new pods gated) until a
  Job of the other queue is deleted (its Workload goes with it), then admitted (borrowing), the
  old slice finished `WorkloadSliceReplaced` and the pods ungated; a scale-down updates the
  admitted count in place and gives the quota back; deactivating the Workload stops the Job,
  activating it resumes it;
- a non-elastic Job whose parallelism changes while admitted is suspended, requeued with a new
  Workload and resumed; one with `job-min-parallelism` may not change it (403 from the webhook);
- a bad ClusterQueue is refused (422, `spec.cohort` 400); the daemon's service account may read
  Workloads (deploy/components/kueue) but not write them.
Exit status 0 when every check passes; each failure is printed. Deadlines only bound the waits.
"""

import json
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
NS = "ml"


class Cluster:
    def __init__(self, url):
        self.url = url

    def request(self, method, path, body=None, token="admin", content_type=None):
        """`(status, JSON answer)` of one request."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}"}
        if data is not None:
            headers["Content-Type"] = content_type or (
                "application/merge-patch+json" if method == "PATCH" else "application/json")
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def ok(self, method, path, body=None):
        status, answer = self.request(method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: {status} {answer}")
        return answer

    def summary(self):
        return self.ok("GET", "/_harness/kueue")

    def job(self, name):
        return self.ok("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/{name}")

    def pods(self, job):
        items = self.ok("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
        return sorted((p for p in items if p["metadata"]["name"].startswith(job + "-")),
                      key=lambda p: p["metadata"]["name"])


def wait_for(what, probe, deadline=20.0):
    """Polls `probe` until it answers a true value (returned), or raises naming `what`."""
    end = time.monotonic() + deadline
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def job_body(name, queue, parallelism, elastic=True, annotations=None):
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kueue.x-k8s.io/queue-name": queue, "trainscale.io/job": name},
                     "annotations": {**({"kueue.x-k8s.io/elastic-job": "true"} if elastic else {}),
                                     **(annotations or {})}},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "completionMode": "Indexed",
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {
                     "restartPolicy": "Never",
                     "containers": [{"name": "t", "image": "trainer",
                                     "resources": {"requests": {"cpu": "1"}}}]}}},
    }


def queue(name, cpu, borrowing=None):
    resource = {"name": "cpu", "nominalQuota": cpu}
    if borrowing is not None:
        resource["borrowingLimit"] = borrowing
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"cohortName": "team", "namespaceSelector": {},
                     "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                         {"name": "default-flavor", "resources": [resource]}]}]}}


def workloads_of(summary, job):
    return {k: w for k, w in summary["workloads"].items() if w["owner"] == job}


def running(pods):
    """The pods running and not being deleted (a terminating pod still says Running)."""
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")]


def gated(pod):
    return any(g.get("name") == "kueue.x-k8s.io/elastic-job"
               for g in pod["spec"].get("schedulingGates") or [])


def scenario(c, check):
    c.ok("POST", f"{KUEUE}/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                              "kind": "ResourceFlavor",
                                              "metadata": {"name": "default-flavor"}})
    c.ok("POST", f"{KUEUE}/clusterqueues", queue("cq-a", "4", borrowing="2"))
    c.ok("POST", f"{KUEUE}/clusterqueues", queue("cq-b", "2"))
    for lq, cq in (("lq-a", "cq-a"), ("lq-b", "cq-b")):
        c.ok("POST", f"{KUEUE}/namespaces/{NS}/localqueues",
             {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
              "metadata": {"name": lq, "namespace": NS}, "spec": {"clusterQueue": cq}})

    # An elastic Job: suspended and gated at creation, then admitted, resumed, its pods ungated.
    created = c.ok("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job_body("el", "lq-a", 2))
    check(created["spec"]["suspend"] is True, "the webhook suspends a Job naming a LocalQueue")
    check({"name": "kueue.x-k8s.io/elastic-job"} in
          created["spec"]["template"]["spec"].get("schedulingGates", []),
          "the webhook gates an elastic Job's pod template")
    wait_for("el admitted and running", lambda: len(running(c.pods("el"))) == 2)
    s = c.summary()
    (key, wl), = workloads_of(s, "el").items()
    check(key.startswith(f"{NS}/job-el-") and len(key.rsplit("-", 1)[1]) == 5,
          f"workload name {key}")
    check(wl["admitted"] and wl["count"] == 2 and wl["admittedCount"] == 2 and
          wl["clusterQueue"] == "cq-a" and wl["flavors"] == {"cpu": "default-flavor"},
          f"el's workload admitted: {wl}")
    check(c.job("el")["spec"]["suspend"] is False, "Kueue unsuspends the admitted Job")
    check(not any(gated(p) for p in c.pods("el")), "el's pods are ungated")
    stored = c.ok("GET", f"{KUEUE}/namespaces/{NS}/workloads/{key.split('/')[1]}")
    owner = stored["metadata"]["ownerReferences"][0]
    check(owner["kind"] == "Job" and owner["name"] == "el" and owner["controller"] is True and
          owner["uid"] == c.job("el")["metadata"]["uid"], f"controller reference {owner}")
    check(stored["spec"]["podSets"][0]["name"] == "main", "pod set main")
    conditions = {x["type"]: x["status"] for x in stored["status"]["conditions"]}
    check(conditions.get("QuotaReserved") == "True" and conditions.get("Admitted") == "True",
          f"conditions {conditions}")

    # cq-b's Job takes its 2 CPUs: el can borrow none of them now.
    c.ok("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job_body("other", "lq-b", 2, False))
    wait_for("other running", lambda: len(running(c.pods("other"))) == 2)

    # Scale-up to 5: 3 more, 2 left in the cohort -> a pending slice, new pods gated.
    c.ok("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/el",
         {"spec": {"parallelism": 5, "completions": 5}})
    s = wait_for("a pending slice", lambda: (lambda s: s if any(
        w["sliceOf"] == key and w["pending"] for w in workloads_of(s, "el").values()) else None)(
        c.summary()))
    (new_key, new), = [(k, w) for k, w in workloads_of(s, "el").items() if w["sliceOf"] == key]
    check(new["count"] == 5 and not new["admitted"] and
          "insufficient unused quota for cpu in flavor default-flavor, 1 more needed" in new["pending"],
          f"pending slice: {new}")
    check(s["workloads"][key]["admitted"], "the old slice stays admitted meanwhile")
    check(new_key in s["clusterQueues"]["cq-a"]["pending"], "cq-a lists the pending slice")
    pods = wait_for("gated pods", lambda: (lambda p: p if len(p) == 5 else None)(c.pods("el")))
    check([p["metadata"]["name"] for p in pods if gated(p)] == ["el-2", "el-3", "el-4"],
          "the new pods are gated")
    check(all(not p["spec"].get("nodeName") and p["status"]["conditions"][0]["reason"] ==
              "SchedulingGated" for p in pods if gated(p)), "gated pods are not scheduled")

    # Freeing cq-b's quota admits the slice: the old one finishes, the pods go.
    status, _ = c.request("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/other")
    check(status == 200, f"delete other: {status}")
    wait_for("el at 5", lambda: len(running(c.pods("el"))) == 5)
    s = c.summary()
    check(s["workloads"][key]["finished"] == "WorkloadSliceReplaced", "old slice replaced")
    check(s["workloads"][new_key]["admitted"] and s["workloads"][new_key]["admittedCount"] == 5,
          "new slice admitted")
    check(not workloads_of(s, "other"), "the deleted Job's Workload is gone")
    check(s["clusterQueues"]["cq-a"]["usage"] == {"default-flavor": {"cpu": "5"}} and
          s["clusterQueues"]["cq-a"]["borrowed"] == {"default-flavor": {"cpu": "1"}},
          f"cq-a usage {s['clusterQueues']['cq-a']}")
    cq = c.ok("GET", f"{KUEUE}/clusterqueues/cq-a")["status"]
    check(cq["admittedWorkloads"] == 1 and cq["flavorsUsage"][0]["resources"][0]["total"] == "5",
          f"cq-a status {cq}")

    # Scale-down to 1: the count changes in place, the quota comes back.
    c.ok("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/el",
         {"spec": {"parallelism": 1, "completions": 1}})
    s = wait_for("el down to 1", lambda: (lambda s: s if s["clusterQueues"]["cq-a"]["usage"] ==
                                          {"default-flavor": {"cpu": "1"}} else None)(c.summary()))
    check(s["workloads"][new_key]["count"] == 1 and s["workloads"][new_key]["admittedCount"] == 1
          and s["workloads"][new_key]["admitted"], f"in-place count: {s['workloads'][new_key]}")
    wait_for("el's extra pods gone", lambda: len(c.pods("el")) == 1)

    # Deactivating the Workload stops the Job (Kueue would undo a plain suspend) and frees the
    # quota; activating it again resumes the Job.
    wl_name = new_key.split("/")[1]
    c.ok("PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{wl_name}", {"spec": {"active": False}})
    wait_for("el stopped", lambda: c.job("el")["spec"]["suspend"] is True and not c.pods("el"))
    s = c.summary()
    check(not s["workloads"][new_key]["admitted"] and not s["workloads"][new_key]["active"] and
          s["clusterQueues"]["cq-a"]["usage"] == {"default-flavor": {"cpu": "0"}},
          f"deactivated: {s['workloads'][new_key]}")
    c.ok("PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{wl_name}", {"spec": {"active": True}})
    wait_for("el resumed", lambda: len(running(c.pods("el"))) == 1)

    # A non-elastic Job changed while admitted: suspended, requeued, resumed at the new count.
    c.ok("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", job_body("fixed", "lq-b", 1, False))
    wait_for("fixed running", lambda: len(running(c.pods("fixed"))) == 1)
    (first, _), = workloads_of(c.summary(), "fixed").items()
    wl_path = f"{KUEUE}/namespaces/{NS}/workloads/{first.split('/')[1]}"
    first_uid = c.ok("GET", wl_path)["metadata"]["uid"]
    c.ok("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/fixed",
         {"spec": {"parallelism": 2, "completions": 2}})
    # (The Job controller may start the second pod before Kueue suspends the Job, as in a
    # real cluster: wait for the new Workload, then for the pods.)
    wait_for("fixed requeued at 2", lambda: [
        w for w in workloads_of(c.summary(), "fixed").values() if w["count"] == 2 and w["admitted"]])
    wait_for("fixed resumed", lambda: c.job("fixed")["spec"]["suspend"] is False and
             len(running(c.pods("fixed"))) == 2)
    wls = workloads_of(c.summary(), "fixed")
    check(list(wls) == [first] and c.ok("GET", wl_path)["metadata"]["uid"] != first_uid,
          f"fixed's Workload deleted and created again (same name): {wls}")

    def resumed():
        conditions = (c.job("fixed").get("status") or {}).get("conditions") or []
        return any(x["type"] == "Suspended" and x["status"] == "False" and
                   x["reason"] == "JobResumed" for x in conditions)
    # The Job controller writes the condition after the pods it creates in the same round.
    try:
        seen = wait_for("fixed's JobResumed condition", resumed, deadline=5.0)
    except AssertionError:
        seen = False
    check(seen, "fixed was suspended and resumed")

    # Partial admission: parallelism may not change while the Job runs.
    c.ok("POST", f"/apis/batch/v1/namespaces/{NS}/jobs",
         job_body("partial", "lq-a", 1, False, {"kueue.x-k8s.io/job-min-parallelism": "1"}))
    wait_for("partial running", lambda: c.job("partial")["spec"]["suspend"] is False)
    status, answer = c.request("PATCH", f"/apis/batch/v1/namespaces/{NS}/jobs/partial",
                               {"spec": {"parallelism": 2}})
    check(status == 403 and answer["reason"] == "Forbidden" and "spec.parallelism: Forbidden"
          in answer["message"], f"partial admission parallelism change: {status} {answer}")

    # Bad input, and RBAC.
    bad = queue("bad", "lots")
    status, answer = c.request("POST", f"{KUEUE}/clusterqueues", bad)
    check(status == 422 and "nominalQuota" in answer["message"], f"bad quota: {status} {answer}")
    old = queue("old", "1")
    old["spec"]["cohort"] = old["spec"].pop("cohortName")
    status, answer = c.request("POST", f"{KUEUE}/clusterqueues", old)
    check(status == 400 and "spec.cohort" in answer["message"], f"v1beta1 field: {status} {answer}")
    status, _ = c.request("GET", f"{KUEUE}/workloads", token="trainscale-sa")
    check(status == 200, f"the service account lists workloads: {status}")
    status, _ = c.request("PATCH", f"{KUEUE}/namespaces/{NS}/workloads/{new_key.split('/')[1]}",
                          {"spec": {}}, token="trainscale-sa")
    check(status == 403, f"the service account may not patch workloads: {status}")


def main():
    failures, count = [], 0

    def check(ok, what):
        nonlocal count
        count += 1
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "kmock_cluster.py"), "--kueue", "--kubeconfig",
             f"{tmp}/kubeconfig", "--lifetime", "120", "--period", "0.1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = proc.stdout.readline()
            if not line.startswith("READY "):
                print(f"the emulator did not start: {line!r}")
                return 1
            started = time.monotonic()
            try:
                scenario(Cluster(line.split()[1]), check)
            except (AssertionError, RuntimeError) as e:
                failures.append(str(e))
            print(f"scenario took {time.monotonic() - started:.1f} s")
        finally:
            proc.stdin.close()
            proc.wait(timeout=10)
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"kueue check: {count - len(failures)} of {count} checks passed"
          + (" (stopped early)" if failures and count == 0 else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
