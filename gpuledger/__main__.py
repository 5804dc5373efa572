import sys

from gpuledger.cli import main

sys.exit(main())
