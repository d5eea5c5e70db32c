"""An optional tunnel command run beside the relay: parsing the command (``command``),
supervising it (``supervisor``), reading its output for the public URL (``output``) and
finding its descendants (``process_tree``)."""
