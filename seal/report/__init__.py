"""Tables, JSON and Markdown written into run directories."""
