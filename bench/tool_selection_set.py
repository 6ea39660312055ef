"""The tool-selection benchmark set: 44 tools a mid-size company's team could have installed
(the built-ins, weather and orders, and eight MCP servers: tickets, CRM, deploys, calendar, HR,
wiki, billing, code hosting), and 66 requests as people type them, each with the tool it needs.

Written before the selector was tuned, from the descriptions real servers of each kind publish;
requests deliberately include paraphrases that share few words with the tool ("where's my
parcel" for an order lookup, "is prod on fire" for a status page).
"""

from __future__ import annotations

from typing import Any


def _tool(name: str, description: str, **params: str | tuple[str, list[str]]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for pname, spec in params.items():
        if isinstance(spec, tuple):
            props[pname] = {"type": "string", "description": spec[0], "enum": spec[1]}
        else:
            props[pname] = {"type": "string", "description": spec}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": list(params)[:1],
                "additionalProperties": False,
            },
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "remember",
        "Store a fact the speaker asked you to remember about them.",
        fact="The fact, in the speaker's words.",
    ),
    _tool(
        "get_current_weather",
        "Current weather for a city: temperature, wind, conditions.",
        location="A full city name",
        unit=("Temperature unit", ["celsius", "fahrenheit"]),
    ),
    _tool(
        "get_weather_forecast",
        "Weather forecast for a city on a date within the next 7 days.",
        location="A full city name",
        date="YYYY-MM-DD",
    ),
    _tool(
        "get_order_status",
        "Look up an order: its status, items, payment, shipping address and "
        "tracking ids. Use it when the user asks where an order is or what it contains.",
        order_id="The order id as the customer gives it, e.g. '#W2611340'.",
    ),
    # tickets (a Jira-like MCP server)
    _tool(
        "tix_search_issues",
        "Search issues in the tracker with text and filters.",
        query="Free text",
        status=("Status", ["open", "in_progress", "done"]),
    ),
    _tool(
        "tix_get_issue",
        "Get one issue by key (e.g. OPS-123): summary, status, assignee, comments.",
        key="Issue key",
    ),
    _tool(
        "tix_create_issue",
        "Create a new issue in a project.",
        project="Project key",
        summary="One-line summary",
        priority=("Priority", ["low", "medium", "high", "urgent"]),
    ),
    _tool("tix_add_comment", "Add a comment to an issue.", key="Issue key", body="Comment text"),
    _tool(
        "tix_transition_issue",
        "Move an issue to another status (start, resolve, reopen).",
        key="Issue key",
        to=("Target status", ["open", "in_progress", "done"]),
    ),
    _tool(
        "tix_assign_issue",
        "Assign an issue to a person.",
        key="Issue key",
        assignee="User name or email",
    ),
    # CRM
    _tool(
        "crm_search_contacts",
        "Find contacts (people at customer companies) by name, email or company.",
        query="Name, email or company",
    ),
    _tool(
        "crm_get_account",
        "Get a customer account: plan, owner, revenue, health score.",
        account="Account name or id",
    ),
    _tool(
        "crm_list_deals",
        "List open sales deals (opportunities) with stage and amount.",
        owner="Sales rep",
        stage=("Stage", ["prospect", "proposal", "negotiation", "won"]),
    ),
    _tool(
        "crm_update_deal",
        "Change a deal's stage, amount or close date.",
        deal="Deal id",
        stage="New stage",
    ),
    _tool(
        "crm_log_activity",
        "Log a call, meeting or email with a contact.",
        contact="Contact",
        kind=("Activity", ["call", "meeting", "email"]),
        notes="What was said",
    ),
    # deploys / status
    _tool(
        "ops_service_status",
        "Current health of production services: up, degraded or down, with open incidents.",
        service="Service name",
    ),
    _tool(
        "ops_list_deployments",
        "Recent deployments of a service: version, who, when, result.",
        service="Service name",
        environment=("Environment", ["staging", "production"]),
    ),
    _tool(
        "ops_trigger_deploy",
        "Deploy a version of a service to an environment.",
        service="Service name",
        version="Git tag or commit",
        environment=("Environment", ["staging", "production"]),
    ),
    _tool("ops_rollback", "Roll a service back to its previous version.", service="Service name"),
    _tool(
        "ops_get_metrics",
        "Error rate, latency and traffic of a service over a time window.",
        service="Service name",
        window="e.g. 1h, 24h",
    ),
    # calendar
    _tool(
        "cal_list_events",
        "List calendar events (meetings) in a time range.",
        start="Start date/time",
        end="End date/time",
    ),
    _tool(
        "cal_create_event",
        "Schedule a meeting: title, time, attendees, room.",
        title="Title",
        start="Start date/time",
        attendees="Emails, comma-separated",
    ),
    _tool(
        "cal_find_free_slot",
        "Find a time when all the given people are free.",
        attendees="Emails, comma-separated",
        duration="Minutes",
    ),
    _tool("cal_cancel_event", "Cancel a meeting and notify attendees.", event="Event id"),
    _tool(
        "cal_book_room",
        "Book a meeting room for a time slot.",
        room="Room name",
        start="Start date/time",
    ),
    # HR
    _tool(
        "hr_get_time_off_balance",
        "How many vacation / PTO days an employee has left.",
        employee="Employee name or email",
    ),
    _tool(
        "hr_request_time_off",
        "Request vacation or sick leave for dates.",
        start="First day",
        end="Last day",
        kind=("Kind", ["vacation", "sick", "parental"]),
    ),
    _tool(
        "hr_find_employee",
        "Find an employee in the directory: role, team, manager, location, phone.",
        query="Name, role or team",
    ),
    _tool(
        "hr_get_policy",
        "Read a company policy (expenses, travel, remote work, equipment).",
        topic="Policy topic",
    ),
    # wiki / docs
    _tool("wiki_search", "Search the internal wiki and documentation pages.", query="Free text"),
    _tool("wiki_get_page", "Read a wiki page by title or URL.", page="Title or URL"),
    _tool(
        "wiki_create_page",
        "Write a new wiki page in a space.",
        space="Space",
        title="Title",
        body="Markdown",
    ),
    _tool("wiki_list_recent", "Pages recently created or edited in a space.", space="Space"),
    # billing
    _tool(
        "bill_get_invoice",
        "Get an invoice by number: amount, due date, paid or not, PDF link.",
        invoice="Invoice number",
    ),
    _tool(
        "bill_list_invoices",
        "List a customer's invoices, optionally only unpaid ones.",
        customer="Customer",
        status=("Status", ["paid", "unpaid", "overdue"]),
    ),
    _tool(
        "bill_issue_refund",
        "Refund all or part of a payment to a customer.",
        payment="Payment id",
        amount="Amount",
    ),
    _tool(
        "bill_get_subscription",
        "A customer's subscription: plan, seats, renewal date, price.",
        customer="Customer",
    ),
    _tool(
        "bill_change_plan",
        "Upgrade or downgrade a customer's subscription plan or seats.",
        customer="Customer",
        plan="New plan",
    ),
    # code hosting
    _tool(
        "git_list_pull_requests",
        "Open pull requests of a repository, with author, reviewers and CI status.",
        repo="owner/name",
    ),
    _tool(
        "git_get_pull_request",
        "One pull request: description, diff stats, checks, reviews.",
        repo="owner/name",
        number="PR number",
    ),
    _tool(
        "git_create_issue", "Open an issue in a code repository.", repo="owner/name", title="Title"
    ),
    _tool("git_search_code", "Search code across repositories.", query="Code or text"),
    _tool("git_list_commits", "Recent commits on a branch.", repo="owner/name", branch="Branch"),
    _tool(
        "git_get_ci_run",
        "Status and logs of a CI pipeline run.",
        repo="owner/name",
        run="Run id or branch",
    ),
]

# (request, the tool it needs, earlier messages of the conversation)
REQUESTS: list[tuple[str, str, list[str]]] = [
    ("What's the weather like in Lisbon right now?", "get_current_weather", []),
    ("Do I need an umbrella in Berlin tomorrow?", "get_weather_forecast", []),
    ("how cold is it in Montreal", "get_current_weather", []),
    ("Will it be sunny in Madrid on Saturday?", "get_weather_forecast", []),
    ("Where is order #W2611340?", "get_order_status", []),
    ("where's my parcel, the number is W8732210", "get_order_status", []),
    ("has order #W5061109 shipped yet and what's the tracking number?", "get_order_status", []),
    ("Remember that I prefer answers in French", "remember", []),
    ("please keep in mind I'm allergic to peanuts", "remember", []),
    ("Find open bugs about the login page", "tix_search_issues", []),
    ("What's going on with OPS-1432?", "tix_get_issue", []),
    ("File a ticket: the VPN drops every hour, high priority, project NET", "tix_create_issue", []),
    ("add a note to OPS-88 saying the vendor called back", "tix_add_comment", []),
    ("mark OPS-88 as done", "tix_transition_issue", []),
    ("give OPS-90 to maria@corp.example", "tix_assign_issue", []),
    ("any open issues mentioning printers?", "tix_search_issues", []),
    ("Who is our contact at Globex?", "crm_search_contacts", []),
    ("What plan is Initech on and how healthy is the account?", "crm_get_account", []),
    ("show me Dana's deals in negotiation", "crm_list_deals", []),
    ("Move the Acme deal to won", "crm_update_deal", []),
    ("log that I had a call with John Smith about renewal", "crm_log_activity", []),
    ("what's the email of the CFO at Umbrella Corp", "crm_search_contacts", []),
    ("Is the payments service down?", "ops_service_status", []),
    ("is prod on fire right now?", "ops_service_status", []),
    ("when did we last ship the checkout service to production?", "ops_list_deployments", []),
    ("Deploy api v2.14.0 to staging", "ops_trigger_deploy", []),
    ("roll back the search service, the new version is broken", "ops_rollback", []),
    ("what's the error rate of the gateway over the last hour?", "ops_get_metrics", []),
    ("latency of checkout today?", "ops_get_metrics", []),
    ("What meetings do I have tomorrow?", "cal_list_events", []),
    ("set up a 30 min sync with ana@corp.example on Friday at 10", "cal_create_event", []),
    ("when are Bob, Ana and I all free next week for an hour?", "cal_find_free_slot", []),
    ("cancel my 3pm meeting", "cal_cancel_event", []),
    ("book the Everest room for 2pm", "cal_book_room", []),
    ("what's on my agenda this afternoon", "cal_list_events", []),
    ("How many vacation days do I have left?", "hr_get_time_off_balance", []),
    ("I want to take leave from July 1 to July 12", "hr_request_time_off", []),
    ("I'm sick today, please log it", "hr_request_time_off", []),
    ("Who manages the data team?", "hr_find_employee", []),
    ("What's the phone number of Priya in the Paris office?", "hr_find_employee", []),
    ("Can I expense a new monitor?", "hr_get_policy", []),
    ("what's our travel policy for conferences", "hr_get_policy", []),
    ("Is there documentation on how to rotate the database credentials?", "wiki_search", []),
    ("open the onboarding checklist page", "wiki_get_page", []),
    ("write up these meeting notes as a wiki page in the ENG space", "wiki_create_page", []),
    ("what changed in the wiki this week in the SRE space?", "wiki_list_recent", []),
    ("how do I set up the dev environment? I think it's written down somewhere", "wiki_search", []),
    ("Has invoice INV-2291 been paid?", "bill_get_invoice", []),
    ("which invoices of Hooli are overdue?", "bill_list_invoices", []),
    ("refund $40 of payment pi_3Nx to the customer", "bill_issue_refund", []),
    (
        "when does Stark Industries renew, and how many seats do they have?",
        "bill_get_subscription",
        [],
    ),
    ("upgrade Wayne Enterprises to the enterprise plan", "bill_change_plan", []),
    ("the customer was charged twice, give them their money back for one", "bill_issue_refund", []),
    ("What PRs are open on acme/web?", "git_list_pull_requests", []),
    ("summarize PR 412 in acme/api", "git_get_pull_request", []),
    ("open an issue in acme/web: dark mode toggle doesn't persist", "git_create_issue", []),
    ("where in our code do we call the geocoding API?", "git_search_code", []),
    ("what got merged to main in acme/api since yesterday?", "git_list_commits", []),
    ("why is the build failing on main in acme/web?", "git_get_ci_run", []),
    # follow-ups: the needed tool is named only in the conversation so far
    (
        "and the one after that?",
        "get_weather_forecast",
        ["What's the forecast for Oslo on Monday?"],
    ),
    ("what about the other one, W1234567?", "get_order_status", ["Where is order #W7654321?"]),
    (
        "and for the staging environment?",
        "ops_list_deployments",
        ["list the recent deployments of the billing service"],
    ),
    ("ok, assign it to me", "tix_assign_issue", ["create a ticket for the broken badge reader"]),
    ("same for Initech", "bill_list_invoices", ["list unpaid invoices for Hooli"]),
    ("and Thursday?", "cal_list_events", ["what meetings do I have on Wednesday?"]),
    ("do it for the search service too", "ops_rollback", ["roll back the gateway please"]),
]
