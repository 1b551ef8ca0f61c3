"""The per-phase sandbox: what a phase's processes may see, reach and signal (README "Sandbox").

The modules the phase shim imports (``landlock``, ``netns``, ``relay``, ``capabilities``,
``launch``) use the standard library only; the server side (``policy``, ``detect``, ``bwrap``,
``seccomp_filter``, ``private_home``, ``phase_sandbox``) may use anything. This file stays empty
of imports so the shim's ``from sandbox import ...`` costs nothing extra.
"""
