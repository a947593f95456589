"""Router mode: several models behind one port, each served by a child instance of this server."""

from __future__ import annotations

from dataclasses import dataclass

from app.config.options import SettingsError, option

DEFAULT_MODELS_MAX = 4  # llama-server's


@dataclass(frozen=True)
class RouterSettings:
    """Router mode: several models behind one port, each served by a child instance of this server."""

    models_dir: str | None = option(("--models-dir",), "str", None,
        "serve every model of this folder (a local folder or a gs:// prefix: one model per .gguf file, or per "
        "subfolder holding a split GGUF or a model and its mmproj* projector) as a router: each model runs in "
        "a child instance, loaded on demand", env="LLAMA_ARG_MODELS_DIR", metavar="PATH")
    models_preset: str | None = option(("--models-preset",), "str", None,
        "an INI file of model presets for the router: a [*] section for every model, one section per model "
        "(keys: flag names without dashes, short names or LLAMA_ARG_* names; load-on-startup, stop-timeout)",
        env="LLAMA_ARG_MODELS_PRESET", metavar="PATH")
    models_max: int = option(("--models-max",), "int", DEFAULT_MODELS_MAX,
        "for the router, most models loaded at once (0 = no limit): the least recently used idle model is "
        "unloaded to make room", env="LLAMA_ARG_MODELS_MAX", minimum=0, metavar="N")
    models_autoload: bool = option(("--models-autoload",), "bool", True,
        "for the router, load a model when a request names it (a request's ?autoload=true|false wins)",
        env="LLAMA_ARG_MODELS_AUTOLOAD", negative_flags=("--no-models-autoload",))

    @property
    def is_router(self) -> bool:
        """A router serves the models of --models-dir and --models-preset and loads none itself."""
        return bool(self.models_dir or self.models_preset)

    def check(self) -> None:
        """A router takes its models from its sources, never from --model or -hf."""
        model = getattr(self, "model", None)
        hf_repo = getattr(self, "hf_repo", None)
        if self.is_router and (model or hf_repo):
            raise SettingsError("--models-dir / --models-preset start a router, which loads no model itself: give "
                                "the model in the folder or in a preset section, not with --model or -hf")
