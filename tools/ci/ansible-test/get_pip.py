"""Stand-in for ansible-test's pip bootstrap script (get-pip.py), which it downloads from
ci-files.testing.ansible.com: that host is unreachable here. ansible-test runs this module with
get-pip's arguments (packages such as pip==24.2, --no-setuptools, --no-wheel, pip options) in a
fresh venv without pip. It seeds pip with ensurepip, then lets that pip install what was asked
for from the configured package index.
"""

import subprocess
import sys


def main():
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
    args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
    if args:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + args)


if __name__ == "__main__":
    main()
