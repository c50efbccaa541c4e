import sys

from kilnotel.mixin.build import main
from mixin import ROOT

sys.exit(main(["--out", str(ROOT), *sys.argv[1:]], prog="python -m mixin"))
