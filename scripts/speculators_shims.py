"""Imports speculators 0.9.0's models without its training-data dependencies.

`import speculators` pulls in its data pipeline (openai, datasets, hs_connectors, loguru, ...), none of
which the model code the reference scripts drive needs. install() stubs those modules (an empty
package whose attributes are inert classes) and gives loguru a standard logger, so that
`speculators.models.*` imports beside only torch and transformers. Call it before the first import of
speculators. Used by scripts/make_dspark_reference.py, scripts/make_released_drafts.py and scripts/bench/dflash_learning_reference.py.
"""
import importlib.abc
import importlib.machinery
import logging
import sys
import types

STUBS = {"openai", "datasets", "hs_connectors", "wandb", "aiohttp", "httpx"}


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in STUBS:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def install():
    if any(isinstance(f, _StubFinder) for f in sys.meta_path):
        return
    loguru = types.ModuleType("loguru")
    loguru.logger = logging.getLogger("loguru")
    sys.modules.setdefault("loguru", loguru)
    sys.meta_path.append(_StubFinder())
