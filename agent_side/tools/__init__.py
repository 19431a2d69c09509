"""The built-in tools: read, write, edit, ls, find, grep, bash, powershell."""
