"""The lint checks, one per module; ALL lists them in the order their codes are documented."""
from __future__ import annotations

from gpudoctor.engine.lint.checks.d1_local_rank_one_spelling import LocalRankOneSpelling
from gpudoctor.engine.lint.checks.d2_batch_script_on_one_node import BatchScriptOnOneNode
from gpudoctor.engine.lint.checks.d3_device_from_rank import DeviceFromGlobalRank
from gpudoctor.engine.lint.checks.d4_fixed_master_port import FixedMasterPort
from gpudoctor.engine.lint.checks.d8_find_unused_parameters import FindUnusedParameters
from gpudoctor.engine.lint.checks.d9_uneven_shards_without_join import UnevenShardsWithoutJoin
from gpudoctor.engine.lint.checks.d10_batchnorm_without_syncbn import BatchNormWithoutSyncBN
from gpudoctor.engine.lint.checks.d12_fsdp_without_wrap_policy import FSDPWithoutWrapPolicy
from gpudoctor.engine.lint.checks.d14_mixed_precision_half_set import MixedPrecisionHalfSet
from gpudoctor.engine.lint.checks.d15_full_state_dict_on_gpu import FullStateDictOnGPU
from gpudoctor.engine.lint.checks.d18_backward_bypasses_engine import BackwardBypassesEngine
from gpudoctor.engine.lint.checks.d20_rank_local_skip import RankLocalSkip
from gpudoctor.engine.lint.checks.d21_collective_in_rank_branch import CollectiveInRankBranch
from gpudoctor.engine.lint.checks.d22_sampler_without_set_epoch import SamplerWithoutSetEpoch
from gpudoctor.engine.lint.checks.d23_every_rank_saves import EveryRankSaves
from gpudoctor.engine.lint.checks.d26_model_changed_on_some_ranks import ModelChangedOnSomeRanks
from gpudoctor.engine.lint.checks.d27_torchrun_per_srun_task import TorchrunPerSrunTask
from gpudoctor.engine.lint.checks.mn3_init_without_timeout import InitWithoutTimeout
from gpudoctor.engine.lint.checks.mn5_restarts_without_resume import RestartsWithoutResume
from gpudoctor.engine.lint.checks.p1_dataparallel import DataParallel
from gpudoctor.engine.lint.checks.p2_ddp_before_to_device import DDPBeforeToDevice
from gpudoctor.engine.lint.checks.p3_ddp_without_sampler import DDPWithoutSampler
from gpudoctor.engine.lint.checks.p4_target_left_on_cpu import TargetLeftOnCPU
from gpudoctor.engine.lint.checks.p5_init_after_ddp import InitAfterDDP
from gpudoctor.engine.lint.checks.p6_accumulation_without_no_sync import AccumulationWithoutNoSync

ALL = (
    LocalRankOneSpelling(), BatchScriptOnOneNode(), DeviceFromGlobalRank(), FixedMasterPort(), FindUnusedParameters(),
    UnevenShardsWithoutJoin(), BatchNormWithoutSyncBN(),
    FSDPWithoutWrapPolicy(), MixedPrecisionHalfSet(), FullStateDictOnGPU(), BackwardBypassesEngine(), RankLocalSkip(),
    CollectiveInRankBranch(), SamplerWithoutSetEpoch(), EveryRankSaves(), ModelChangedOnSomeRanks(),
    TorchrunPerSrunTask(), InitWithoutTimeout(), RestartsWithoutResume(),
    DataParallel(), DDPBeforeToDevice(), DDPWithoutSampler(), TargetLeftOnCPU(),
    InitAfterDDP(), AccumulationWithoutNoSync(),
)
BY_CODE = {c.code: c for c in ALL}
BY_SLUG = {c.slug: c for c in ALL}
