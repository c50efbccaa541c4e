import sys

from kilnotel.mixin.build import main

sys.exit(main())
