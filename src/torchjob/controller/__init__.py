"""The controller side: the control loop (observe → plan → execute → write status) and what drives it.

``loop.reconcile_once`` is one pass for one job on one backend; ``local_driver.supervise`` drives it for a local job
(``daemon`` when detached), ``operator`` for every job of a cluster (with its watches, work queue, leader
election, health and metrics endpoints, and the report server Pods send progress and in-place announcements to).
"""
