"""``python -s -m torchjob.launch -- python SCRIPT ARGS...``: a Pod's launcher (pod.py)."""

from torchjob.launch import pod

if __name__ == "__main__":
    pod.main()
