"""The folders the harness shares between processes and with its users, each owned by one class:
the launch directory the parent and the ranks share (`launch_dir.LaunchDir`) and the report
folder a run leaves (`report_dir.ReportDir`). Every file name of either is spelled in its class
only, so a rename is one edit and a reader finds the whole layout in one place.

Light on purpose: pathlib and json only, so the rank worker imports it before torch, and any
package (spec, run, rank, report, cli) imports it without closing an import cycle."""
