# Copyright 2026 The HuggingFace Team. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""Trainer under `nn.DataParallel` (`args.n_gpu > 1`: several GPUs visible, no torchrun) with a loss that takes
`num_items_in_batch`, issues #37151 and #37474."""

from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments, is_torch_available
from transformers.testing_utils import (
    TestCasePlus,
    backend_device_count,
    require_torch,
    require_torch_multi_accelerator,
    torch_device,
)


if is_torch_available():
    import torch


SEQ_LEN = 8
SUPERVISED = [7, 2, 5, 1, 4]  # labelled positions per row: a loss normalized by the wrong count shows


def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        use_cache=False,
    )
    return LlamaForCausalLM(config)


def rows(n):
    generator = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        input_ids = torch.randint(1, 64, (SEQ_LEN,), generator=generator)
        labels = input_ids.clone()
        labels[: SEQ_LEN - SUPERVISED[i % len(SUPERVISED)]] = -100
        out.append({"input_ids": input_ids, "labels": labels, "attention_mask": torch.ones(SEQ_LEN, dtype=torch.long)})
    return out


class CountScalingTrainer(Trainer):
    """A `compute_loss` of its own, as subclasses write it from the Trainer's: it passes the count to the model and,
    when averaging tokens across devices, multiplies the loss of the replicas by `n_gpu`."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs, num_items_in_batch=num_items_in_batch)
        loss = outputs.loss
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * (self.args.n_gpu if self.args.n_gpu > 1 else self.accelerator.num_processes)
        return (loss, outputs) if return_outputs else loss


class OwnDataParallelTrainer(Trainer):
    """A `_wrap_model` of its own that wraps the model in a plain `nn.DataParallel`, as subclasses written from older
    releases do."""

    def _wrap_model(self, model, training=True, dataloader=None):
        if self.args.n_gpu > 1 and not isinstance(model, torch.nn.DataParallel):
            model = torch.nn.DataParallel(model)
        return model


def token_mean_loss(outputs, labels, num_items_in_batch):
    """A `compute_loss_func` that reads the count as a number, as many do."""
    logits = outputs.logits[:, :-1].flatten(0, 1)
    loss = torch.nn.functional.cross_entropy(logits, labels[:, 1:].flatten(), ignore_index=-100, reduction="sum")
    return loss / num_items_in_batch.item()


@require_torch
class TrainerDataParallelNumItemsTest(TestCasePlus):
    def train(self, n_gpu, batch_size, use_cpu=True, trainer_class=Trainer, num_rows=None, **trainer_kwargs):
        """Train a tiny Llama on `num_rows` rows (by default `batch_size + 1`: a batch of `batch_size` rows, then one
        of the row left), with `n_gpu` replicas; the logged loss of each step."""
        args = TrainingArguments(
            output_dir=self.get_auto_remove_tmp_dir(),
            per_device_train_batch_size=batch_size // n_gpu,
            num_train_epochs=1,
            learning_rate=0.5,
            optim="sgd",
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=use_cpu,
            seed=0,
        )
        self.assertEqual(args.device.type, "cpu" if use_cpu else torch_device)
        # The Trainer wraps the model in `nn.DataParallel` when `n_gpu > 1` and takes `n_gpu` times the rows per
        # device in a batch. On CPU, DataParallel has no device to scatter to and runs the module once on the whole
        # batch: a batch that fewer replicas run than `n_gpu`, as the last, smaller batch of an epoch can be.
        args._n_gpu = n_gpu
        train_dataset = rows(num_rows or batch_size + 1)
        trainer = trainer_class(model=tiny_llama(), args=args, train_dataset=train_dataset, **trainer_kwargs)
        trainer.train()
        self.assertEqual(isinstance(trainer.model_wrapped, torch.nn.DataParallel), n_gpu > 1)
        return [log["loss"] for log in trainer.state.log_history if "loss" in log]

    def assert_losses_of_one_device(self, losses, one_device):
        self.assertEqual(len(losses), len(one_device))
        for step, (loss, reference) in enumerate(zip(losses, one_device)):
            self.assertEqual(round(loss / reference, 2), 1.0, f"step {step}: loss {loss} instead of {reference}")

    def test_loss_of_a_batch_that_fewer_replicas_run(self):
        self.assert_losses_of_one_device(self.train(n_gpu=2, batch_size=4), self.train(n_gpu=1, batch_size=4))

    def test_compute_loss_func_gets_the_count_one_device_gets(self):
        losses = self.train(n_gpu=2, batch_size=4, compute_loss_func=token_mean_loss)
        self.assert_losses_of_one_device(losses, self.train(n_gpu=1, batch_size=4, compute_loss_func=token_mean_loss))

    def test_compute_loss_override_that_scales_as_the_trainer_does(self):
        losses = self.train(n_gpu=2, batch_size=4, trainer_class=CountScalingTrainer)
        self.assert_losses_of_one_device(losses, self.train(n_gpu=1, batch_size=4, trainer_class=CountScalingTrainer))

    @require_torch_multi_accelerator
    def test_last_smaller_batch_on_accelerators(self):
        """Real `nn.DataParallel` over every accelerator: a full batch, then one row that one replica runs."""
        n_gpu = backend_device_count(torch_device)
        batch_size = 2 * n_gpu
        losses = self.train(n_gpu=n_gpu, batch_size=batch_size, use_cpu=False)
        self.assert_losses_of_one_device(losses, self.train(n_gpu=1, batch_size=batch_size, use_cpu=False))

    @require_torch_multi_accelerator
    def test_plain_data_parallel_of_a_subclass_on_accelerators(self):
        """A subclass's own `nn.DataParallel` gets the count in the form it scatters: full batches as on one device."""
        n_gpu = backend_device_count(torch_device)
        batch_size = 2 * n_gpu
        kwargs = {"batch_size": batch_size, "use_cpu": False, "num_rows": 2 * batch_size}
        losses = self.train(n_gpu=n_gpu, trainer_class=OwnDataParallelTrainer, **kwargs)
        self.assert_losses_of_one_device(losses, self.train(n_gpu=1, **kwargs))
