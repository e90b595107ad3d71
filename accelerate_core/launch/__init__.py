"""Launch settings: what `accelerate-core launch` was given, turned into LaunchSettings.

The chain, in the order a launch meets it: config_file.py reads and writes the YAML file on disk;
config.py checks its keys and values and turns a LaunchConfig into LaunchSettings; settings.py
writes LaunchSettings into the environment of the processes the launcher starts (with where each
value came from) and is the one place they are read back in those processes.

The rule for what lives here: a module whose job is to turn the launcher's inputs (a config file,
launch flags, the ACCELERATE_CORE_* environment variables) into LaunchSettings, or back. Modules
that only use the settings stay outside: connector.py turns them, with the Accelerator's
arguments, into one strategy and one precision; state.py reads the rank and world size that
torch.distributed.run exports and owns the process group; the command line itself is
accelerate_core/commands/. So do the modules several layers share: choices.py (the valid values,
checked by the plugins and precisions too) and machine.py (what this machine is).

Nothing is imported here; none of these modules imports torch or deepspeed.
"""
