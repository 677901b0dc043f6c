"""A stand-in for torchvision in the SGLang test environment: importable, never usable.

SGLang imports torchvision at module level for its multimodal configs
(``sglang.srt.configs`` imports them all, and the linear layers import that).
The registry's torchvision for torch 2.13 is CUDA-linked and fails to import
beside the CPU torch (``operator torchvision::nms does not exist``), and the
tests load no multimodal model. Any submodule imports; calling anything in it
raises, naming it.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+stand-in"


class _Unavailable:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Unavailable(f"{self._name}.{attribute}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name}: torchvision is a stand-in in this environment (testkit/stubs)")


def _module_getattr(module_name):
    def get(attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Unavailable(f"{module_name}.{attribute}")

    return get


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Submodules())
__getattr__ = _module_getattr(__name__)
