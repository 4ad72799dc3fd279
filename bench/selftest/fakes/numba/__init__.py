import sys

__version__ = "fake"

# numba-cuda installs a finder (its _numba_cuda_redirector.pth) that sends
# every import of numba.cuda to its own package, which needs the real
# numba.core: where it is installed, this stand-in's numba.cuda would never
# load.  The stand-in's package drops that finder when it is imported.
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "NumbaCudaFinder"]
