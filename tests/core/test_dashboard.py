"""The Grafana dashboard (docker/grafana) reads only metrics the bot exports, with labels they
have, and the compose file loads it: a renamed metric or label fails here, not on a screen."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from bot.metrics import REGISTRY

DOCKER = Path(__file__).resolve().parents[2] / "docker"
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
PROMQL_WORDS = {"by", "sum", "rate", "increase", "max", "histogram_quantile", "le"}


def exported() -> dict[str, set[str]]:
    """Metric name (as scraped, with its suffixes) -> label names."""
    names: dict[str, set[str]] = {}
    for family in REGISTRY.collect():
        labels: set[str] = set()
        for sample in family.samples:
            labels |= set(sample.labels)
        for name in {family.name, *(family.name + s for s in SUFFIXES)}:
            names[name] = labels | {"le"}
    # Families with no samples yet still declare their labels.
    for collector in list(REGISTRY._collector_to_names):
        declared = set(getattr(collector, "_labelnames", ()))
        for name in REGISTRY._collector_to_names[collector]:
            names.setdefault(name, set()).update(declared | {"le"})
    return names


def test_every_panel_reads_an_exported_metric_with_its_labels() -> None:
    dashboard = json.loads((DOCKER / "grafana/dashboards/chatbot.json").read_text())
    metrics = exported()
    seen: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            used = set(re.findall(r"\b(bot_[a-z_]+)\b", expr))
            assert used, expr
            for name in used:
                assert name in metrics, f"{panel['title']}: {name} is not exported"
                seen.add(name)
            grouped = re.findall(r"by \(([^)]*)\)", expr) + re.findall(r"\{([a-z_]+)", expr)
            for group in grouped:
                for label in (x.strip() for x in group.split(",")):
                    assert any(label in metrics[n] for n in used), f"{expr}: label {label}"
    for wanted in ("bot_turns_total", "bot_usage_cost_dollars_total", "bot_inbox_depth"):
        assert wanted in seen


def test_compose_provisions_prometheus_and_the_dashboard() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    grafana = compose["services"]["grafana"]
    mounts = " ".join(grafana["volumes"])
    assert "./grafana/dashboards" in mounts and "./grafana/provisioning" in mounts
    provider = yaml.safe_load((DOCKER / "grafana/provisioning/dashboards/chatbot.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    scrape = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    assert scrape["scrape_configs"][0]["static_configs"][0]["targets"] == ["bot:3000"]
