import sys

from vm_images.test_image import main

raise SystemExit(main(sys.argv))
