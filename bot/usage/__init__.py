"""Usage you can see and bound: every model request metered and priced, budgets with
reservation, `/usage` and `bot usage` (DESIGN: "Contract: usage, budgets and feedback")."""
