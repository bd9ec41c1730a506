"""The build's compiled parts (Cython extensions): the redo reader's line loop, the
PostgreSQL reader's insert step, the read-back's records to columns and the dispatcher's
batch step.

Everything else is declared in setup.cfg. The extensions are built from
``olr_buffer/sources/redo/linescan.pyx``, ``olr_buffer/sources/postgres/tuplescan.pyx``,
``olr_buffer/changes/recscan.pyx`` and ``olr_buffer/dispatcher/batchscan.pyx``
with the machine's C compiler (Cython comes from
pyproject.toml's build requirements); they take the inline helpers of
``olr_buffer/_cython/*.pxd``, found from the checkout's root (``include_path``).
It is optional: without a compiler, or without
Cython, the install goes on without them and each runs its pure-Python path
(``olr-buffer --version`` says which, for each).
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # a build without pyproject.toml's requirements: pure Python
    ext_modules = []
else:
    ext_modules = cythonize(
        [
            Extension("olr_buffer.sources.redo.linescan", ["olr_buffer/sources/redo/linescan.pyx"]),
            Extension("olr_buffer.sources.postgres.tuplescan", ["olr_buffer/sources/postgres/tuplescan.pyx"]),
            Extension("olr_buffer.changes.recscan", ["olr_buffer/changes/recscan.pyx"]),
            Extension("olr_buffer.dispatcher.batchscan", ["olr_buffer/dispatcher/batchscan.pyx"]),
        ],
        include_path=["."],  # where `from olr_buffer._cython.utf8 cimport ...` is found
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for ext in ext_modules:
        ext.optional = True  # a compiler that fails or is missing: a warning, and no extension (cythonize drops it)

setup(ext_modules=ext_modules)
