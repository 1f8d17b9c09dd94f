CREATE TABLE `batch_files` (
	`id` text PRIMARY KEY NOT NULL,
	`key_id` text NOT NULL,
	`purpose` text NOT NULL,
	`filename` text NOT NULL,
	`bytes` integer NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `batch_files_key_idx` ON `batch_files` (`key_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `batches` (
	`id` text PRIMARY KEY NOT NULL,
	`key_id` text NOT NULL,
	`model` text NOT NULL,
	`endpoint` text NOT NULL,
	`input_file_id` text NOT NULL,
	`status` text NOT NULL,
	`completion_window` text NOT NULL,
	`metadata` text,
	`errors` text,
	`output_file_id` text,
	`error_file_id` text,
	`total` integer DEFAULT 0 NOT NULL,
	`completed` integer DEFAULT 0 NOT NULL,
	`failed` integer DEFAULT 0 NOT NULL,
	`cost_nanos` integer DEFAULT 0 NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	`times` text
);
--> statement-breakpoint
CREATE INDEX `batches_key_idx` ON `batches` (`key_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `usage_records` ADD `batch_id` text;--> statement-breakpoint
ALTER TABLE `usage_records` ADD `custom_id` text;