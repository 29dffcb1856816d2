#!/usr/bin/env python3
"""Runs every query of the Grafana dashboard against a Prometheus and fails
unless each returns data.

Usage: check_dashboard.py DASHBOARD.json PROMETHEUS_URL JOB_ID
Dashboard variables: $job_id becomes JOB_ID, $__rate_interval 1m. Also checks
that per-job series carry the job_id label and keep Prometheus's own `job`.
"""
import json
import sys
import urllib.parse
import urllib.request


def query(url, expr):
    with urllib.request.urlopen(
            f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}",
            timeout=10) as response:
        body = json.load(response)
    if body.get("status") != "success":
        sys.exit(f"query failed: {expr}: {body}")
    return body["data"]["result"]


def main():
    dashboard, url, job_id = sys.argv[1:4]
    panels = json.load(open(dashboard))["panels"]
    queries = 0
    for panel in panels:
        for target in panel.get("targets", []):
            expr = (target["expr"].replace("$job_id", job_id)
                    .replace("$__rate_interval", "1m"))
            result = query(url, expr)
            if not result:
                sys.exit(f"panel '{panel['title']}': no data for {expr}")
            queries += 1
    loss = query(url, f'glm_job_lm_loss{{job_id="{job_id}"}}')
    labels = loss[0]["metric"]
    if labels.get("job") != "glm-coordinator":
        sys.exit(f"glm_job_lm_loss labels {labels}: `job` is not the scrape job")
    print(f"{len(panels)} panels, {queries} queries, each with data")


if __name__ == "__main__":
    main()
