"""Local stand-ins for remote services (the OpenAI API), driven through the real client libs."""
