"""A second request set for the tool-selection benchmark, never used for tuning.

Written on 2026-12-05, after the related-words vocabulary of `tools/selection_vocab.py` and
without changing it afterwards: 30 more requests over the same 44 tools
(`bench/tool_selection_set.py`), phrased the way people type in chat. Its recall is reported on
its own, as the check that the vocabulary generalises beyond the words of the first set.
"""

from __future__ import annotations

# (request, the tool it needs, earlier messages of the conversation)
FRESH_REQUESTS: list[tuple[str, str, list[str]]] = [
    ("is it raining in Dublin at the moment?", "get_current_weather", []),
    ("what will the temperature be in Rome next Tuesday", "get_weather_forecast", []),
    ("my package hasn't arrived, order W4410923", "get_order_status", []),
    ("what did I buy in order #W1002003?", "get_order_status", []),
    ("don't forget that my manager is Carla", "remember", []),
    (
        "is anyone already working on the SSO timeout problem? check the tracker",
        "tix_search_issues",
        [],
    ),
    ("show me NET-77", "tix_get_issue", []),
    ("raise a bug: exports time out for large files", "tix_create_issue", []),
    ("reopen SEC-12", "tix_transition_issue", []),
    ("who's our main person at Soylent?", "crm_search_contacts", []),
    ("how much revenue does the Vandelay account bring in?", "crm_get_account", []),
    ("which opportunities is Tom working on?", "crm_list_deals", []),
    ("is the auth service healthy?", "ops_service_status", []),
    ("push build 3.2.1 of the worker to production", "ops_trigger_deploy", []),
    ("who deployed the api last and did it succeed?", "ops_list_deployments", []),
    ("how much traffic is the gateway getting this week", "ops_get_metrics", []),
    ("am I busy on Thursday morning?", "cal_list_events", []),
    (
        "invite lee@corp.example and kim@corp.example to a design review on Monday 2pm",
        "cal_create_event",
        [],
    ),
    ("call off tomorrow's standup", "cal_cancel_event", []),
    ("I need a room for 6 people at 11", "cal_book_room", []),
    ("how much PTO does Jonas have?", "hr_get_time_off_balance", []),
    ("who is the head of finance?", "hr_find_employee", []),
    ("are we allowed to work from abroad?", "hr_get_policy", []),
    ("is there a runbook for the kafka outage?", "wiki_search", []),
    ("do we owe anything on INV-3310?", "bill_get_invoice", []),
    ("how many seats does Hooli pay for?", "bill_get_subscription", []),
    ("move Pied Piper down to the basic plan", "bill_change_plan", []),
    ("who needs to review my pull request in acme/web?", "git_list_pull_requests", []),
    ("find where we define the retry timeout in the code", "git_search_code", []),
    ("did the tests pass on the release branch of acme/api?", "git_get_ci_run", []),
]
