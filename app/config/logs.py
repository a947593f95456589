"""The log: how much, where, in which form; --version."""

from __future__ import annotations

from dataclasses import dataclass

from app.config.options import FALSE, TRUE, SettingsError, option


@dataclass(frozen=True)
class LogSettings:
    """The log: how much, where, in which form; --version."""

    version: bool = option(("--version",), "bool", False,
        "print the versions (this server, llama-cpp-python, the llama.cpp it vendors) and exit")
    cache_list: bool = option(("-cl", "--cache-list"), "bool", False,
        "print the models of the Hugging Face cache (-hf downloads in --model-cache-dir) and exit")
    completion_bash: bool = option(("--completion-bash",), "bool", False,
        "print a bash completion script for python -m app's flags and exit (source it: "
        "eval \"$(python -m app --completion-bash)\")")
    verbose: bool = option(("-v", "--verbose", "--log-verbose"), "bool", False, "verbose logging (llama.cpp logs too)",
        env="LLAMA_ARG_VERBOSE")
    log_verbosity: int = option(("-lv", "--verbosity", "--log-verbosity"), "int", 3,
        "log threshold: 0 generic, 1 errors, 2 warnings, 3 info, 4 debug (llama.cpp's too, as -v)",
        env="LLAMA_ARG_LOG_VERBOSITY", minimum=0, metavar="N")
    log_disable: bool = option(("--log-disable",), "bool", False, "no log output")
    log_file: str | None = option(("--log-file",), "str", None, "also write the log to this file",
        env="LLAMA_ARG_LOG_FILE", metavar="FNAME")
    log_prompts_dir: str | None = option(("--log-prompts-dir",), "str", None,
        "write each generation's prompt to a file of this directory (created if missing), named by the time in "
        "milliseconds: the rendered text, or the prompt's JSON when it is not text (debugging)", metavar="PATH")
    log_colors: str = option(("--log-colors",), "str", "auto",
        "colored levels in the text log: on, off or auto (a terminal)", env="LLAMA_ARG_LOG_COLORS",
        metavar="[on|off|auto]")
    log_prefix: bool = option(("--log-prefix",), "bool", True, "each text log line names its level and logger",
        env="LLAMA_ARG_LOG_PREFIX", negative_flags=("--no-log-prefix",))
    log_timestamps: bool = option(("--log-timestamps",), "bool", True, "each text log line starts with its time",
        env="LLAMA_ARG_LOG_TIMESTAMPS", negative_flags=("--no-log-timestamps",))
    log_jsonl: bool = option(("--log-jsonl",), "bool", False,
        "the log as JSON lines (Cloud Logging's fields; always so with AIP_MODE=PREDICTION)",
        env="LLAMA_ARG_LOG_JSONL", negative_flags=("--no-log-jsonl",))

    @property
    def debug_logs(self) -> bool:
        """-v, or -lv 4 and above: debug lines, llama.cpp's own included."""
        return self.verbose or self.log_verbosity >= 4

    def check(self) -> None:
        if self.log_colors.strip().lower() not in TRUE | FALSE | {"auto"}:
            raise SettingsError(f"--log-colors: invalid value {self.log_colors!r} (expected on, off or auto)")
