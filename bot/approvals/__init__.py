"""Approvals before actions (DESIGN "approvals before actions"): which calls wait for the
person (`risk`), the pause and the decision (`desk`), and how a request reads (`render`)."""
