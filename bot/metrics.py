"""Prometheus metrics for the whole bot, on one dedicated registry served at GET /metrics.

A dedicated `CollectorRegistry` (not the process-global default) keeps tests and several apps in
one process from clashing on metric names, and keeps /metrics free of unrelated collectors.

Who increments what:
- the core (turn loop, model client, tool engine, summaries, feedback): `TURNS`,
  `TURN_LATENCY`, `MODEL_LATENCY`, `MODEL_TOKENS`, `TOOL_CALLS`, `ERRORS`, `SUMMARIES`,
  `FEEDBACK_VOTES`;
- adapters: `EVENTS`, `DEDUPLICATED_EVENTS`, `ACK_LATENCY`, `PLATFORM_API_ERRORS`, `ERRORS`,
  `EVENT_LOOP_LAG`, `TURNS_WAITING`, `REJECTED_REQUESTS`, `DROPPED_MESSAGES`.

Label values must come from small fixed sets (never user text, ids or tokens).
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
_ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 3.0)

TURNS = Counter(
    "bot_turns_total",
    "Turns answered, by platform and outcome (ok | error).",
    ["platform", "outcome"],
    registry=REGISTRY,
)
TURN_LATENCY = Histogram(
    "bot_turn_latency_seconds",
    "Wall time of one turn, from the core receiving the message to the final reply.",
    ["platform"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
MODEL_LATENCY = Histogram(
    "bot_model_latency_seconds",
    "Wall time of one model request, by kind (chat | summary | extract).",
    ["kind"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "bot_model_tokens_total",
    "Tokens reported by the model API, by kind and direction (prompt | completion).",
    ["kind", "direction"],
    registry=REGISTRY,
)
USAGE_TOKENS = Counter(
    "bot_usage_tokens_total",
    "Metered model tokens by team, model, kind (chat | summary | memory | extract ...) and type "
    "(prompt | cached_prompt | completion); estimated where the server sent no usage.",
    ["team", "model", "kind", "type"],
    registry=REGISTRY,
)
USAGE_COST = Counter(
    "bot_usage_cost_dollars_total",
    "Priced cost of metered model requests (BOT_PRICES), by team, model and kind.",
    ["team", "model", "kind"],
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "bot_tool_calls_total",
    "Tool calls by tool name and outcome "
    "(ok | bad_arguments | unknown_tool | business_error | transient | timeout).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
ERRORS = Counter(
    "bot_errors_total",
    "Errors by component (turn | model | tool | store | a platform ...) and kind.",
    ["component", "kind"],
    registry=REGISTRY,
)
EVENTS = Counter(
    "bot_platform_events_total",
    "Platform events received by adapters, by platform and kind (event type or command).",
    ["platform", "kind"],
    registry=REGISTRY,
)
DEDUPLICATED_EVENTS = Counter(
    "bot_deduplicated_events_total",
    "Events dropped because they were already delivered (platform retries, double delivery).",
    ["platform"],
    registry=REGISTRY,
)
ACK_LATENCY = Histogram(
    "bot_ack_latency_seconds",
    "Time to acknowledge a platform request (some platforms require under 3 s).",
    ["platform"],
    buckets=_ACK_BUCKETS,
    registry=REGISTRY,
)
EVENT_LOOP_LAG = Gauge(
    "bot_event_loop_lag_seconds",
    "How late a 10 ms timer fired last (the adapter holds back new turns while it is high).",
    registry=REGISTRY,
)
TURNS_WAITING = Gauge(
    "bot_turns_waiting",
    "Received messages waiting to start their turn (admission control under CPU load).",
    ["platform"],
    registry=REGISTRY,
)
SUMMARIES = Counter(
    "bot_summaries_total",
    "Background summaries of a session's older turns, by outcome: ok | failed (the model or "
    "the reply was unusable; that session backs off) | discarded (an erasure or another "
    "process got there first).",
    ["outcome"],
    registry=REGISTRY,
)
PLATFORM_API_ERRORS = Counter(
    "bot_platform_api_errors_total",
    "Failed platform Web API calls, by platform and API method.",
    ["platform", "method"],
    registry=REGISTRY,
)
REJECTED_REQUESTS = Counter(
    "bot_rejected_requests_total",
    "Requests refused before reaching the platform SDK, by reason (too_large | slow_body | "
    "aborted | bad_signature | stale_signature | malformed | idle_connection).",
    ["platform", "reason"],
    registry=REGISTRY,
)
DROPPED_MESSAGES = Counter(
    "bot_dropped_messages_total",
    "Messages deliberately not answered, by platform and reason (rate_limited | edited ...).",
    ["platform", "reason"],
    registry=REGISTRY,
)
FEEDBACK_VOTES = Counter(
    "bot_feedback_votes_total",
    "Feedback votes on final replies stored (a changed vote counts again), by platform and "
    "vote (up | down). No person, team or reply ids.",
    ["platform", "vote"],
    registry=REGISTRY,
)
TURNS_REFUSED = Counter(
    "bot_turns_refused_total",
    "Messages answered with a polite refusal instead of a turn, by platform and reason "
    "(user_rate | team_rate | team_queue).",
    ["platform", "reason"],
    registry=REGISTRY,
)

TOOL_BREAKER_STATE = Gauge(
    "bot_tool_breaker_state",
    "Circuit breaker of each tool provider (a pack, or one team's install): "
    "0 closed, 1 half-open, 2 open.",
    ["provider"],
    registry=REGISTRY,
)
TOOL_BREAKER_OPENS = Counter(
    "bot_tool_breaker_opens_total",
    "Times a tool provider's circuit breaker opened after repeated transient failures.",
    ["provider"],
    registry=REGISTRY,
)


def render() -> tuple[bytes, str]:
    """The registry in Prometheus text format, and the content type to serve it with."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


# The nightly consolidation (bot.memory.consolidation).
CONSOLIDATION_RUNS = Counter(
    "bot_consolidation_runs_total",
    "Consolidation runs by result (ok | capped: stopped at the token cap | busy: lease held).",
    ["result"],
    registry=REGISTRY,
)
CONSOLIDATION_SESSIONS = Counter(
    "bot_consolidation_sessions_total",
    "Sessions consolidated.",
    registry=REGISTRY,
)
CONSOLIDATION_CANDIDATES = Counter(
    "bot_consolidation_candidates_total",
    "Fact candidates of the consolidation by outcome (ADD | UPDATE | DELETE | NOOP | REJECT).",
    ["outcome"],
    registry=REGISTRY,
)
CONSOLIDATION_TOKENS = Counter(
    "bot_consolidation_tokens_total",
    "Model tokens spent by the consolidation.",
    registry=REGISTRY,
)
CONSOLIDATION_SECONDS = Histogram(
    "bot_consolidation_duration_seconds",
    "Wall time of one consolidation run.",
    buckets=(1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0),
    registry=REGISTRY,
)

# The durable inbox between the ack and the turn (bot.inbox). `kind` is the entry kind
# (slack.message, discord.message).
INBOX_DEPTH = Gauge(
    "bot_inbox_depth",
    "Entries in the durable inbox not handled yet (waiting or in flight, every replica).",
    ["kind"],
    registry=REGISTRY,
)
INBOX_OLDEST = Gauge(
    "bot_inbox_oldest_seconds",
    "Age of the oldest entry of the inbox not handled yet (0 when empty).",
    ["kind"],
    registry=REGISTRY,
)
INBOX_CLAIMED = Counter(
    "bot_inbox_claimed_total",
    "Entries this process took over from a dead or stopping worker (or an earlier attempt).",
    ["kind"],
    registry=REGISTRY,
)
INBOX_ENTRY_LOST = Counter(
    "bot_inbox_entry_lost_total",
    "Entries this process was still running when another worker took them over (its lease "
    "ran out: a stall longer than BOT_INBOX_CLAIM_SECONDS); each is a possible duplicate.",
    ["kind"],
    registry=REGISTRY,
)
INBOX_DEAD_LETTER = Counter(
    "bot_inbox_dead_letter_total",
    "Entries dropped after too many deliveries (each attempt crashed its worker).",
    ["kind"],
    registry=REGISTRY,
)
INBOX_FALLBACK = Counter(
    "bot_inbox_fallback_total",
    "Events run in this process at once because the inbox could not be written (no durability).",
    ["kind"],
    registry=REGISTRY,
)
INBOX_ORDER_TIMEOUTS = Counter(
    "bot_inbox_order_timeouts_total",
    "Entries that ran without their session's earlier entry done after waiting the bound.",
    ["kind"],
    registry=REGISTRY,
)
