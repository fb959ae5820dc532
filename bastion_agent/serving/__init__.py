"""Search for people and programs: the HTTP server with its page and OpenAPI description, and the MCP server.
"""
