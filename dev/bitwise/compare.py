import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert sorted(a.files) == sorted(b.files), set(a.files) ^ set(b.files)
bad = [k for k in a.files if not (a[k].shape == b[k].shape and a[k].dtype == b[k].dtype and
       (np.array_equal(a[k], b[k]) if a[k].dtype.kind in "fc" else (a[k] == b[k]).all()))]
print(len(a.files), "arrays compared;", len(bad), "differ", bad[:10])
