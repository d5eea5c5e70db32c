"""An optional tunnel command run beside the relay (its command line is a setting,
``relay.settings.tunnel_command``): supervising it (``supervisor``), reading its output
for the public URL (``output``) and finding its descendants (``process_tree``)."""
