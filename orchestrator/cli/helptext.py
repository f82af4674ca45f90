"""How `--help` is laid out: rich-click panels grouping each command's options by purpose (what to tune /
where / how to tune / outcome / output), the commands by what they are for, and the global options every
command accepts (before or after its name)."""
from __future__ import annotations

GLOBAL = {"name": "Global options (before or after the command)",
          "options": ["--inventory", "--workspace", "--quiet", "--json", "--store"]}

OPTION_GROUPS = {
    "tune-remote run": [
        {"name": "What to tune", "options": ["--variant", "--log", "--shapes-csv", "--nk", "--model", "--tp",
                                             "--m-preset", "--max-m", "--budget", "--table-from-log", "--padded-m",
                                             "--q-dtype-w", "--reuse"]},
        {"name": "Where", "options": ["--node", "--container", "--slurm", "--slurm-nodes", "--gpus",
                                      "--force-cu-num", "--accept-new-host-key"]},
        {"name": "How to tune", "options": ["--batch", "--timeout", "--stall-timeout", "--tune-arg", "--splitk",
                                            "--libtype", "--err-ratio", "--moe-tuners"]},
        {"name": "Outcome", "options": ["--repeats", "--promote", "--serve-cmd"]},
        {"name": "Output", "options": ["--dry-run", "--job-id", "--detach", "--yes", "--help"]},
        GLOBAL,
    ],
    "tune-remote shapes": [
        {"name": "What to mine", "options": ["--variant", "--model", "--tp", "--m-preset", "--gfx", "--ep",
                                             "--fuse-shared-experts", "--gemm-variant"]},
        {"name": "Where (the gfx of a node)", "options": ["--node", "--container"]},
        {"name": "Output", "options": ["--csv", "--help"]},
        GLOBAL,
    ],
    "tune-remote recheck": [
        {"name": "Where", "options": ["--node", "--container", "--all-nodes", "--accept-new-host-key"]},
        {"name": "What", "options": ["--variant", "--repeats"]},
        {"name": "Outcome", "options": ["--demote", "--undo", "--help"]},
        GLOBAL,
    ],
    "tune-remote watch": [
        {"name": "What to watch", "options": ["--node", "--container", "--log", "--variant", "--name"]},
        {"name": "What to tune", "options": ["--min-misses", "--budget", "--retune", "--repeats", "--promote",
                                             "--reuse"]},
        {"name": "When", "options": ["--interval", "--once", "--accept-new-host-key", "--help"]},
        GLOBAL,
    ],
    "tune-remote *": [GLOBAL],
}

COMMAND_GROUPS = {
    "*": [
        {"name": "Tune", "commands": ["demo", "run", "resume", "cancel"]},
        {"name": "Look", "commands": ["status", "logs", "report", "fetch", "shapes"]},
        {"name": "Outcome", "commands": ["promote", "rollback", "export"]},
        {"name": "Over time", "commands": ["watch", "recheck", "audit"]},
        {"name": "Offline tools", "commands": ["csv"]},
        {"name": "The team's store", "commands": ["rows", "store"]},
    ],
}


def help_config():
    from rich_click import RichHelpConfiguration
    return RichHelpConfiguration(option_groups=OPTION_GROUPS, command_groups=COMMAND_GROUPS,
                                 show_arguments=True, text_markup="ansi",
                                 options_table_column_types=["required", "opt_long", "opt_short", "help"],
                                 options_table_help_sections=["help", "metavar", "default", "required"])
